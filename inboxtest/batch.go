package inboxtest

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/txinbox/inbox"
)

func testBatchDuplicatesInsideAndAcross[TTx any](t *testing.T, x *suite[TTx]) {
	c := x.client(nil)
	h, cs := x.effect("billing")
	a, b, cc, d := NewID(), NewID(), NewID(), NewID()
	ctx := context.Background()
	rs, err := c.ProcessBatch(ctx, "billing", []inbox.Message{msg(a), msg(b), msg(strings.ToUpper(a)), msg(cc)}, h)
	if err != nil {
		t.Fatal(err)
	}
	requireOutcomes(t, rs, inbox.Applied, inbox.Applied, inbox.Duplicate, inbox.Applied)
	rs, err = c.ProcessBatch(ctx, "billing", []inbox.Message{msg(cc), msg(d), msg(b), msg(d)}, h)
	if err != nil {
		t.Fatal(err)
	}
	requireOutcomes(t, rs, inbox.Duplicate, inbox.Applied, inbox.Duplicate, inbox.Duplicate)
	requireEqual(t, "handler order", strings.Join(cs.list(), ","), strings.Join([]string{a, b, cc, d}, ","))
	for _, id := range []string{a, b, cc, d} {
		x.requireEffects("billing", id, 1)
	}
	rs, err = c.ProcessBatch(ctx, "billing", []inbox.Message{msg(a), msg(d)}, h)
	if err != nil {
		t.Fatal(err)
	}
	requireOutcomes(t, rs, inbox.Duplicate, inbox.Duplicate)
	requireEqual(t, "handler calls", len(cs.list()), 4)
}

func testBatchIsolatesPoison[TTx any](t *testing.T, x *suite[TTx]) {
	c := x.client(nil)
	ids := []string{NewID(), NewID(), NewID(), NewID(), NewID()}
	poison := map[string]error{ids[1]: errBoom, ids[3]: inbox.Permanent(errBoom)}
	attempts := map[string]int{}
	var mu sync.Mutex
	h := inbox.HandlerFunc[TTx](func(ctx context.Context, tx TTx, m inbox.Message) error {
		mu.Lock()
		attempts[m.ID]++
		mu.Unlock()
		if err := x.s.Effect(ctx, tx, "billing", m.ID); err != nil {
			return err
		}
		return poison[m.ID]
	})
	msgs := make([]inbox.Message, len(ids))
	for i, id := range ids {
		msgs[i] = msg(id)
	}
	rs, err := c.ProcessBatch(context.Background(), "billing", msgs, h)
	if err != nil {
		t.Fatal(err)
	}
	requireOutcomes(t, rs, inbox.Applied, errBoom, inbox.Applied, errBoom, inbox.Applied)
	if !inbox.IsPermanent(rs[3].Err) || inbox.IsPermanent(rs[1].Err) {
		t.Fatalf("permanence lost: %v / %v", rs[1].Err, rs[3].Err)
	}
	for i, id := range ids {
		want := 1
		if poison[id] != nil {
			want = 0
		}
		x.requireEffects("billing", id, want)
		if attempts[id] > 3 {
			t.Fatalf("message %d handled %d times: the split is not bounded", i, attempts[id])
		}
	}

	// Ordered: nothing after a retryable failure is attempted.
	fresh := []string{NewID(), ids[1], NewID(), NewID()}
	msgs = []inbox.Message{msg(fresh[0]), msg(fresh[1]), msg(fresh[2]), {ID: ""}}
	rs, err = c.ProcessBatchOrdered(context.Background(), "billing", msgs, h)
	if err != nil {
		t.Fatal(err)
	}
	requireOutcomes(t, rs, inbox.Applied, errBoom, inbox.ErrNotAttempted, inbox.ErrNoMessageID)
	x.requireEffects("billing", fresh[2], 0)
}

func testBatchHandler[TTx any](t *testing.T, x *suite[TTx]) {
	// A BatchHandler gets the new messages of a transaction in one
	// call, in order; a poison message among them is isolated by
	// splitting the batch in halves.
	c := x.client(nil)
	ctx := context.Background()
	ids := make([]string, 8)
	for i := range ids {
		ids[i] = NewID()
	}
	poison := ids[5]
	var mu sync.Mutex
	var calls [][]string
	bh := inbox.BatchHandlerFunc[TTx](func(ctx context.Context, tx TTx, msgs []inbox.Message) error {
		got := make([]string, len(msgs))
		for i, m := range msgs {
			got[i] = m.ID
		}
		mu.Lock()
		calls = append(calls, got)
		mu.Unlock()
		for _, m := range msgs {
			if m.ID == poison {
				return errBoom
			}
			if err := x.s.Effect(ctx, tx, "billing", m.ID); err != nil {
				return err
			}
		}
		return nil
	})
	h, _ := x.effect("billing")
	RequireApplied(t)(c.Process(ctx, "billing", msg(ids[1]), h))
	msgs := make([]inbox.Message, len(ids))
	for i, id := range ids {
		msgs[i] = msg(id)
	}
	rs, err := c.ProcessBatch(ctx, "billing", msgs, bh)
	if err != nil {
		t.Fatal(err)
	}
	requireOutcomes(t, rs, inbox.Applied, inbox.Duplicate, inbox.Applied, inbox.Applied, inbox.Applied, errBoom, inbox.Applied, inbox.Applied)
	for _, id := range ids {
		want := 1
		if id == poison {
			want = 0
		}
		x.requireEffects("billing", id, want)
	}
	first := strings.Join(calls[0], ",")
	requireEqual(t, "first call: the new messages, in order", first,
		strings.Join([]string{ids[0], ids[2], ids[3], ids[4], ids[5], ids[6], ids[7]}, ","))
	if len(calls) > 2*len(ids) {
		t.Fatalf("%d handler calls for %d messages: the split is not bounded", len(calls), len(ids))
	}

	// Ordered: after the poison's retryable failure, nothing later is
	// applied.
	fresh := []string{NewID(), NewID(), poison, NewID()}
	msgs = []inbox.Message{msg(fresh[0]), msg(fresh[1]), msg(fresh[2]), msg(fresh[3])}
	rs, err = c.ProcessBatchOrdered(ctx, "billing", msgs, bh)
	if err != nil {
		t.Fatal(err)
	}
	requireOutcomes(t, rs, inbox.Applied, inbox.Applied, errBoom, inbox.ErrNotAttempted)
	x.requireEffects("billing", fresh[3], 0)
	RequireApplied(t)(c.Process(ctx, "billing", msg(fresh[3]), bh))
}

func testBatchRejectsBadIDs[TTx any](t *testing.T, x *suite[TTx]) {
	c := x.client(nil)
	h, cs := x.effect("billing")
	good := NewID()
	rs, err := c.ProcessBatch(context.Background(), "billing",
		[]inbox.Message{{ID: ""}, msg("not-a-uuid"), msg(good), msg("00000000-0000-0000-0000-000000000000")}, h)
	if err != nil {
		t.Fatal(err)
	}
	requireOutcomes(t, rs, inbox.ErrNoMessageID, inbox.ErrMalformedID, inbox.Applied, inbox.ErrMalformedID)
	requireEqual(t, "handler calls", len(cs.list()), 1)
}
