package inboxtest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/outbox"
)

func testOutboxManyRelaysPublishEachEventOnce[TTx any](t *testing.T, x *suite[TTx]) {
	ctx := context.Background()
	o := x.outbox(nil)
	const n = 300
	want := x.enqueueN(o, n, 25, func(i int) outbox.Message {
		return outbox.Message{Topic: "orders", Payload: []byte(strconv.Itoa(i))}
	})
	sink := &countingSink{}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		r := x.relay(o, sink, &outbox.RelayConfig{BatchSize: 16})
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Bounded: 4 relays need at most n/16+1 rounds between them.
			for range n {
				res, err := r.RelayOnce(ctx)
				if err != nil {
					errs <- err
					return
				}
				if res.Claimed == 0 {
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("RelayOnce: %v", err)
	}
	x.requireOutbox(0, 0)
	got := sink.counts()
	requireEqual(t, "events published", len(got), n)
	for _, id := range want {
		requireEqual(t, "publishes of "+id, got[id], 1)
	}
}

func testOutboxRunningRelaysPublishEachEventOnce[TTx any](t *testing.T, x *suite[TTx]) {
	// Run, unlike RelayOnce, carries the delete of a full batch
	// with its next claim, where the store can: still each event
	// once, and none left once the relays stopped.
	o := x.outbox(nil)
	const n = 250
	want := x.enqueueN(o, n, 50, func(i int) outbox.Message {
		return outbox.Message{Topic: "orders", Payload: []byte(strconv.Itoa(i))}
	})
	sink := &countingSink{}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 2 {
		r := x.relay(o, sink, &outbox.RelayConfig{BatchSize: 20, Workers: 2, PollInterval: time.Millisecond})
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = r.Run(ctx)
		}()
	}
	deadline := time.Now().Add(time.Minute)
	for {
		if got := sink.counts(); len(got) == n {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			wg.Wait()
			t.Fatalf("the relays published %d of %d events in a minute", len(sink.counts()), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	x.requireOutbox(0, 0)
	got := sink.counts()
	for _, id := range want {
		requireEqual(t, "publishes of "+id, got[id], 1)
	}
}

func testOutboxLapsedClaimIsPublishedAgainWithTheSameID[TTx any](t *testing.T, x *suite[TTx]) {
	// A relay that dies after the broker confirmed and before the
	// delete: its claim lapses, another relay publishes the same
	// event id again, and the dead relay's write-back, fenced by
	// its token, touches nothing.
	ctx := context.Background()
	o := x.outbox(nil)
	ids, err := o.Enqueue(ctx, outbox.Message{Topic: "orders"}, outbox.Message{Topic: "orders"})
	requireNoError(t, "Enqueue", err)
	store := x.outboxStore()
	now := time.Now()
	claimed, err := store.OutboxClaim(ctx, &inboxdriver.OutboxClaimParams{Token: "dead-relay", Now: now, LeaseUntil: now.Add(time.Minute), Limit: 10})
	requireNoError(t, "OutboxClaim", err)
	requireEqual(t, "claimed", len(claimed), 2)
	// Within the lease, no one else takes them.
	sink := &outbox.MemorySink{}
	res := x.relayOnce(x.relay(o, sink, nil))
	requireEqual(t, "claimed within the lease", res.Claimed, 0)
	// After it, another relay does.
	later := x.relay(o, sink, &outbox.RelayConfig{Now: func() time.Time { return time.Now().Add(2 * time.Minute) }})
	res = x.relayOnce(later)
	requireEqual(t, "published after the lease", res.Published, 2)
	got := map[string]bool{}
	for _, r := range sink.Records() {
		got[r.Headers[outbox.HeaderEventID]] = true
	}
	requireEqual(t, "same id", got[ids[0]] && got[ids[1]], true)
	n, err := store.OutboxAck(ctx, &inboxdriver.OutboxAckParams{IDs: ids, Token: "dead-relay"})
	requireNoError(t, "OutboxAck", err)
	requireEqual(t, "rows the stale token touched", n, int64(0))
}

func testOutboxRejectionsParkAfterTheBudget[TTx any](t *testing.T, x *suite[TTx]) {
	ctx := context.Background()
	o := x.outbox(nil)
	ids, err := o.Enqueue(ctx, outbox.Message{Topic: "orders"}, outbox.Message{Topic: "too-big"}, outbox.Message{Topic: "orders"})
	requireNoError(t, "Enqueue", err)
	sink := &outbox.MemorySink{Reject: func(r outbox.Record) error {
		if r.Topic == "too-big" {
			return errors.New("MESSAGE_TOO_LARGE")
		}
		return nil
	}}
	r := x.relay(o, sink, &outbox.RelayConfig{MaxRejections: 3, Backoff: func(int) time.Duration { return 0 }})
	var parked int
	for i := range 3 {
		res := x.relayOnce(r)
		requireEqual(t, fmt.Sprintf("round %d rejected", i), res.Rejected, 1)
		parked += res.Parked
	}
	requireEqual(t, "parked", parked, 1)
	requireEqual(t, "published", sink.Confirmed(), 2)
	x.requireOutbox(0, 1)
	res := x.relayOnce(r)
	requireEqual(t, "a parked event is not claimed", res.Claimed, 0)
	row, err := x.outboxStore().OutboxGet(ctx, ids[1])
	requireNoError(t, "OutboxGet", err)
	requireEqual(t, "attempts", row.Attempts, 3)
	requireEqual(t, "last error", row.LastError, "MESSAGE_TOO_LARGE")
	requireEqual(t, "parked", row.ParkedAt.IsZero(), false)
	// Unparked, it gets a fresh budget.
	ok, err := x.outboxStore().OutboxSet(ctx, &inboxdriver.OutboxSetParams{ID: ids[1], Action: inboxdriver.OutboxUnpark, Now: time.Now()})
	requireNoError(t, "unpark", err)
	requireEqual(t, "unparked", ok, true)
	sink.Reject = nil // the broker's limit was raised
	res = x.relayOnce(r)
	requireEqual(t, "published after the unpark", res.Published, 1)
	x.requireOutbox(0, 0)
}

func testOutboxUnreachableBrokerNeverParks[TTx any](t *testing.T, x *suite[TTx]) {
	ctx := context.Background()
	o := x.outbox(nil)
	ids, err := o.Enqueue(ctx, outbox.Message{Topic: "orders"}, outbox.Message{Topic: "orders"})
	requireNoError(t, "Enqueue", err)
	down := errors.New("dial tcp 127.0.0.1:9092: connection refused")
	sink := &outbox.MemorySink{Reject: func(outbox.Record) error { return outbox.Unavailable(down) }}
	r := x.relay(o, sink, &outbox.RelayConfig{MaxRejections: 2})
	for i := range 10 {
		res := x.relayOnce(r)
		requireEqual(t, fmt.Sprintf("round %d unavailable", i), res.Unavailable, 2)
		requireEqual(t, "parked", res.Parked, 0)
		requireErrorIs(t, res.UnavailableErr, outbox.ErrUnavailable)
	}
	x.requireOutbox(2, 0)
	for _, id := range ids {
		row, err := x.outboxStore().OutboxGet(ctx, id)
		requireNoError(t, "OutboxGet", err)
		requireEqual(t, "attempts", row.Attempts, 0)
	}
	sink.Reject = nil
	requireEqual(t, "published once the broker is back", x.relayOnce(r).Published, 2)
}

// countingSink counts each event id's publishes.
type countingSink struct {
	mu sync.Mutex
	n  map[string]int
}

func (s *countingSink) Publish(_ context.Context, recs []outbox.Record) []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n == nil {
		s.n = map[string]int{}
	}
	for _, r := range recs {
		s.n[r.Headers[outbox.HeaderEventID]]++
	}
	return make([]error, len(recs))
}

func (s *countingSink) counts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.n))
	for k, v := range s.n {
		out[k] = v
	}
	return out
}
