package inboxtest

import (
	"context"
	"errors"
	"testing"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/outbox"
)

func testOutboxEnqueueCommitsWithTheTransaction[TTx any](t *testing.T, x *suite[TTx]) {
	ctx := context.Background()
	o := x.outbox(nil)
	msgs := []outbox.Message{
		{Topic: "orders", Key: []byte("acct-1"), Payload: []byte(`{"n":1}`), Headers: map[string]string{"traceparent": "00-abc"}},
		{Topic: "orders", Payload: []byte(`{"n":2}`)},
		{Topic: "audit", Key: []byte("acct-2")},
	}
	// Rolled back: nothing to publish.
	tx := x.begin()
	_, err := o.EnqueueTx(ctx, tx, msgs...)
	requireNoError(t, "EnqueueTx", err)
	requireNoError(t, "rollback", x.s.Driver.Rollback(ctx, tx))
	x.requireOutbox(0, 0)

	tx = x.begin()
	ids, err := o.EnqueueTx(ctx, tx, msgs...)
	requireNoError(t, "EnqueueTx", err)
	requireNoError(t, "commit", x.s.Driver.Commit(ctx, tx))
	requireEqual(t, "ids", len(ids), 3)
	for _, id := range ids {
		canon, err := inbox.IDFormatUUID.CanonicalID(id)
		requireNoError(t, "minted id", err)
		requireEqual(t, "minted id is canonical", canon, id)
		requireEqual(t, "minted id is a UUIDv7", id[14], byte('7'))
	}
	if ids[0] == ids[1] || ids[1] == ids[2] {
		t.Fatalf("minted ids repeat: %v", ids)
	}
	x.requireOutbox(3, 0)

	sink := &outbox.MemorySink{}
	res := x.relayOnce(x.relay(o, sink, nil))
	requireEqual(t, "published", res.Published, 3)
	x.requireOutbox(0, 0)
	recs := sink.Records()
	requireEqual(t, "records", len(recs), 3)
	byID := map[string]outbox.Record{}
	for _, r := range recs {
		byID[r.ID] = r
		requireEqual(t, "event-id header", r.Headers[outbox.HeaderEventID], r.ID)
	}
	r0 := byID[ids[0]]
	requireEqual(t, "topic", r0.Topic, "orders")
	requireEqual(t, "key", string(r0.Key), "acct-1")
	requireEqual(t, "payload", string(r0.Payload), `{"n":1}`)
	requireEqual(t, "header", r0.Headers["traceparent"], "00-abc")
	requireEqual(t, "no key", byID[ids[1]].Key == nil, true)
	requireEqual(t, "empty payload", len(byID[ids[2]].Payload), 0)
	// A second round finds nothing: each event went out once.
	res = x.relayOnce(x.relay(o, sink, nil))
	requireEqual(t, "claimed again", res.Claimed, 0)
	requireEqual(t, "publishes", sink.Confirmed(), 3)
}

func testOutboxKeepsTheCallersIDAndRefusesBadMessages[TTx any](t *testing.T, x *suite[TTx]) {
	ctx := context.Background()
	o := x.outbox(nil)
	own := NewID()
	ids, err := o.Enqueue(ctx, outbox.Message{ID: "{" + upper(own) + "}", Topic: "orders"})
	requireNoError(t, "Enqueue", err)
	requireEqual(t, "canonical id", ids[0], own)
	row, err := x.outboxStore().OutboxGet(ctx, own)
	requireNoError(t, "OutboxGet", err)
	requireEqual(t, "stored id", row.ID, own)

	bad := []struct {
		name string
		msgs []outbox.Message
		is   error
	}{
		{"no topic", []outbox.Message{{Payload: []byte("x")}}, outbox.ErrInvalidMessage},
		{"key too long", []outbox.Message{{Topic: "t", Key: make([]byte, inboxdriver.MaxOutboxKeyLen+1)}}, outbox.ErrInvalidMessage},
		{"own header", []outbox.Message{{Topic: "t", Headers: map[string]string{outbox.HeaderEventID: "x"}}}, outbox.ErrInvalidMessage},
		{"malformed id", []outbox.Message{{ID: "not-a-uuid", Topic: "t"}}, inbox.ErrMalformedID},
		{"same id twice", []outbox.Message{{ID: NewID(), Topic: "t"}, {Topic: "t"}}, nil},
	}
	bad[4].msgs[1].ID = bad[4].msgs[0].ID
	for _, b := range bad {
		tx := x.begin()
		_, err := o.EnqueueTx(ctx, tx, append([]outbox.Message{{Topic: "fine"}}, b.msgs...)...)
		if err == nil {
			t.Fatalf("%s: EnqueueTx: no error", b.name)
		}
		if b.is != nil {
			requireErrorIs(t, err, b.is)
		}
		requireNoError(t, "commit", x.s.Driver.Commit(ctx, tx))
	}
	// Nothing of a refused enqueue was written, not even its good
	// messages.
	x.requireOutbox(1, 0)
}

func testOutboxHandlerOutputsCommitWithTheInboxRow[TTx any](t *testing.T, x *suite[TTx]) {
	// Consume, transform, produce: the handler enqueues its output
	// in the transaction of its inbox row, so a redelivery, a
	// Duplicate, has nothing to send again.
	ctx := context.Background()
	c := x.client(nil)
	o := x.outbox(nil)
	h := inbox.HandlerFunc[TTx](func(ctx context.Context, tx TTx, m inbox.Message) error {
		_, err := o.EnqueueTx(ctx, tx, outbox.Message{Topic: "invoices", Key: []byte("acct-1"), Payload: m.Payload, CausationID: m.ID})
		return err
	})
	in := msg(NewID())
	out, err := c.Process(ctx, "billing", in, h)
	requireNoError(t, "Process", err)
	requireEqual(t, "outcome", out, inbox.Applied)
	out, err = c.Process(ctx, "billing", in, h)
	requireNoError(t, "Process again", err)
	requireEqual(t, "outcome of the redelivery", out, inbox.Duplicate)
	// A handler that fails takes its output with it.
	failing := inbox.HandlerFunc[TTx](func(ctx context.Context, tx TTx, m inbox.Message) error {
		if _, err := o.EnqueueTx(ctx, tx, outbox.Message{Topic: "invoices", CausationID: m.ID}); err != nil {
			return err
		}
		return errors.New("card declined")
	})
	if _, err := c.Process(ctx, "billing", msg(NewID()), failing); err == nil {
		t.Fatal("Process with a failing handler: no error")
	}
	x.requireOutbox(1, 0)
	sink := &outbox.MemorySink{}
	x.relayOnce(x.relay(o, sink, nil))
	recs := sink.Records()
	requireEqual(t, "records", len(recs), 1)
	requireEqual(t, "causation id", recs[0].Headers[outbox.HeaderCausationID], in.ID)
}

func testOutboxEnqueueBatchNeedsAQueueingStore[TTx any](t *testing.T, x *suite[TTx]) {
	// EnqueueBatch queues on the store's batch type where the store
	// has one (inboxpgx: a *pgx.Batch) and says ErrNotQueueable
	// where it has none; it never writes anything itself.
	o := x.outbox(nil)
	_, queues := x.outboxStore().(inboxdriver.OutboxQueuer)
	_, err := o.EnqueueBatch(struct{}{}, outbox.Message{Topic: "orders"})
	if !queues {
		if !errors.Is(err, outbox.ErrNotQueueable) {
			t.Fatalf("EnqueueBatch on a store that cannot queue: got %v, want ErrNotQueueable", err)
		}
	} else if err == nil || errors.Is(err, outbox.ErrNotQueueable) {
		t.Fatalf("EnqueueBatch on a batch of the wrong type: got %v, want an error naming the type", err)
	}
	x.requireOutbox(0, 0)
}
