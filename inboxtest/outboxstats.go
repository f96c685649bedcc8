package inboxtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/outbox"
)

func testOutboxStatsListAndOperatorActions[TTx any](t *testing.T, x *suite[TTx]) {
	ctx := context.Background()
	created := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	o := x.outbox(&outbox.Config{Now: func() time.Time { return created }})
	ids, err := o.Enqueue(ctx, outbox.Message{Topic: "a"}, outbox.Message{Topic: "b"}, outbox.Message{Topic: "c"})
	requireNoError(t, "Enqueue", err)
	store := x.outboxStore()
	st, err := x.client(nil).Admin().OutboxStats(ctx)
	requireNoError(t, "Client.OutboxStats", err)
	requireEqual(t, "pending", st.Pending, int64(3))
	requireEqual(t, "oldest pending", st.OldestPending.Equal(created), true)
	if st.Lag < time.Minute {
		t.Fatalf("lag %v, want at least a minute", st.Lag)
	}
	set := func(id string, a inboxdriver.OutboxAction, want bool) {
		t.Helper()
		ok, err := store.OutboxSet(ctx, &inboxdriver.OutboxSetParams{ID: id, Action: a, Now: time.Now()})
		requireNoError(t, string(a), err)
		requireEqual(t, string(a)+" found the row", ok, want)
	}
	set(ids[0], inboxdriver.OutboxParkRow, true)
	set(ids[0], inboxdriver.OutboxParkRow, false) // already parked
	set(ids[0], inboxdriver.OutboxRetryNow, false)
	set(ids[1], inboxdriver.OutboxRetryNow, true)
	set(ids[1], inboxdriver.OutboxUnpark, false) // not parked
	set(NewID(), inboxdriver.OutboxParkRow, false)
	x.requireOutbox(2, 1)
	parked, err := store.OutboxList(ctx, &inboxdriver.OutboxListParams{State: inboxdriver.OutboxParked, Limit: 10})
	requireNoError(t, "OutboxList", err)
	requireEqual(t, "parked rows", len(parked), 1)
	requireEqual(t, "parked row", parked[0].ID, ids[0])
	all, err := store.OutboxList(ctx, &inboxdriver.OutboxListParams{Limit: 10})
	requireNoError(t, "OutboxList", err)
	requireEqual(t, "rows", len(all), 3)
	if _, err := store.OutboxGet(ctx, NewID()); !errors.Is(err, inboxdriver.ErrNotFound) {
		t.Fatalf("OutboxGet of a missing row: %v, want ErrNotFound", err)
	}

	// Kept after publishing, then purged.
	r := x.relay(o, &outbox.MemorySink{}, &outbox.RelayConfig{KeepPublished: true})
	requireEqual(t, "published", x.relayOnce(r).Published, 2)
	st, err = x.client(nil).Admin().OutboxStats(ctx)
	requireNoError(t, "Stats", err)
	requireEqual(t, "stats", [3]int64{st.Pending, st.Parked, st.Published}, [3]int64{0, 1, 2})
	requireEqual(t, "no lag", st.Lag, time.Duration(0))
	pub, err := store.OutboxList(ctx, &inboxdriver.OutboxListParams{State: inboxdriver.OutboxPublished, Limit: 10})
	requireNoError(t, "OutboxList", err)
	requireEqual(t, "published rows", len(pub), 2)
	requireEqual(t, "published at", pub[0].PublishedAt.IsZero(), false)
	n, err := o.PurgePublished(ctx, time.Now().Add(time.Minute), 1)
	requireNoError(t, "PurgePublished", err)
	requireEqual(t, "purged", n, int64(2))
	x.requireOutbox(0, 1)
}
