package inboxtest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxtype"
)

func testEffectPerConsumer[TTx any](t *testing.T, x *suite[TTx]) {
	c := x.client(nil)
	r := &remote{}
	id := NewID()
	for _, consumer := range []string{"billing", "inventory"} {
		h, _ := x.effectHandler(c, r, "capture", nil, consumer)
		RequireApplied(t)(c.Process(context.Background(), consumer, msg(id), h))
	}
	requireKeys(t, r, inbox.EffectKey("billing", id, "capture"), inbox.EffectKey("inventory", id, "capture"))
	requireEqual(t, "entries", len(x.entries(c, inboxtype.EffectListParams{MessageID: id})), 2)
	requireEqual(t, "billing entries", len(x.entries(c, inboxtype.EffectListParams{Consumer: "billing"})), 1)
}

func testEffectInBatch[TTx any](t *testing.T, x *suite[TTx]) {
	// A poison message splits the batch and its batch-mates run
	// again: their calls are not repeated.
	c := x.client(nil)
	r := &remote{}
	ids := []string{NewID(), NewID(), NewID()}
	h := inbox.HandlerFunc[TTx](func(ctx context.Context, tx TTx, m inbox.Message) error {
		if _, err := c.Effect(ctx, m, "capture", r.call, &inbox.EffectOpts{NonIdempotent: true}); err != nil {
			return err
		}
		if m.ID == ids[2] {
			return errBoom
		}
		return x.s.Effect(ctx, tx, "billing", m.ID)
	})
	rs, err := c.ProcessBatch(context.Background(), "billing", []inbox.Message{msg(ids[0]), msg(ids[1]), msg(ids[2])}, h)
	if err != nil {
		t.Fatal(err)
	}
	requireOutcomes(t, rs, inbox.Applied, inbox.Applied, errBoom)
	requireKeys(t, r, inbox.EffectKey("billing", ids[0], "capture"), inbox.EffectKey("billing", ids[1], "capture"),
		inbox.EffectKey("billing", ids[2], "capture"))
}

func testEffectRejectsBadInput[TTx any](t *testing.T, x *suite[TTx]) {
	c := x.client(nil)
	r := &remote{}
	ctx := context.Background()
	id := NewID()
	_, err := c.Effect(ctx, msg(id), "capture", r.call, nil)
	requireErrorIs(t, err, inbox.ErrInvalidConsumer)
	bctx := inbox.WithConsumer(ctx, "billing")
	for _, step := range []string{"", " capture", "cap\nture", strings.Repeat("s", inbox.MaxStepLen+1), "cap\xffture"} {
		_, err := c.Effect(bctx, msg(id), step, r.call, nil)
		requireErrorIs(t, err, inbox.ErrInvalidStep)
		if inbox.IsRetryable(err) {
			t.Fatalf("a bad step must not be retryable: %v", err)
		}
	}
	_, err = c.Effect(bctx, msg("not-a-uuid"), "capture", r.call, nil)
	requireErrorIs(t, err, inbox.ErrMalformedID)
	_, err = c.Effect(inbox.WithConsumer(ctx, " billing"), msg(id), "capture", r.call, nil)
	requireErrorIs(t, err, inbox.ErrInvalidConsumer)
	requireKeys(t, r)
	requireEqual(t, "entries", len(x.entries(c, inboxtype.EffectListParams{})), 0)

	// A driver without the ledger says so.
	plain, err := inbox.NewClient[TTx](&countingDriver[TTx]{Driver: x.s.Driver}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = plain.Effect(bctx, msg(id), "capture", r.call, nil)
	requireErrorIs(t, err, inbox.ErrEffectsUnsupported)
}

func testEffectWithClaimTx[TTx any](t *testing.T, x *suite[TTx]) {
	// With the caller's transaction, the caller names the consumer;
	// a non-canonical id gets the canonical id's key.
	c := x.client(nil)
	r := &remote{}
	ctx := context.Background()
	id := NewID()
	tx, err := x.s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m := msg(strings.ToUpper(id))
	out, err := c.ClaimTx(ctx, tx, "billing", m)
	if err != nil || out != inbox.Applied {
		t.Fatalf("ClaimTx: %v, %v", out, err)
	}
	if _, err := c.Effect(inbox.WithConsumer(ctx, "billing"), m, "capture", r.call, nil); err != nil {
		t.Fatal(err)
	}
	if err := x.s.Driver.Commit(ctx, tx); err != nil {
		t.Fatal(err)
	}
	requireKeys(t, r, inbox.EffectKey("billing", id, "capture"))
	requireEqual(t, "entry id", x.entry(c, "billing", id, "capture").MessageID, id)
}

func testEffectForget[TTx any](t *testing.T, x *suite[TTx]) {
	c := x.client(nil)
	r := &remote{}
	ctx := context.Background()
	id := NewID()
	h, _ := x.effectHandler(c, r, "capture", nil, "billing")
	RequireApplied(t)(c.Process(ctx, "billing", msg(id), h))
	n, err := c.Admin().ForgetCount(ctx, "billing", id)
	requireEqual(t, "forget count error", err, nil)
	requireEqual(t, "rows to forget", n, inboxtype.ForgetCounts{InboxRows: 1, Effects: 1})
	requireEqual(t, "entries after the count", len(x.entries(c, inboxtype.EffectListParams{MessageID: id})), 1)
	if err := c.Admin().Forget(ctx, "billing", id); err != nil {
		t.Fatal(err)
	}
	requireEqual(t, "entries after Forget", len(x.entries(c, inboxtype.EffectListParams{MessageID: id})), 0)
	RequireApplied(t)(c.Process(ctx, "billing", msg(id), h))
	key := inbox.EffectKey("billing", id, "capture")
	requireKeys(t, r, key, key)

	// A message parked with a started step and no inbox row can be
	// forgotten too.
	parked := NewID()
	x.startStep("billing", parked, "capture", time.Now())
	n, err = c.Admin().ForgetCount(ctx, "billing", parked)
	requireEqual(t, "forget count error", err, nil)
	requireEqual(t, "rows to forget of a parked message", n, inboxtype.ForgetCounts{InboxRows: 0, Effects: 1})
	if err := c.Admin().Forget(ctx, "billing", parked); err != nil {
		t.Fatalf("Forget of a message with only a ledger entry: %v", err)
	}
	requireEqual(t, "entries after Forget", len(x.entries(c, inboxtype.EffectListParams{MessageID: parked})), 0)
	requireErrorIs(t, c.Admin().Forget(ctx, "billing", parked), inbox.ErrNotFound)
}

func testEffectPurge[TTx any](t *testing.T, x *suite[TTx]) {
	c := x.client(&inbox.Config{ReplayHorizon: 24 * time.Hour})
	r := &remote{}
	ctx := context.Background()
	h, _ := x.effectHandler(c, r, "capture", nil, "billing")
	old := time.Now().Add(-10 * 24 * time.Hour)
	oldIDs := []string{NewID(), NewID(), NewID()}
	for _, id := range oldIDs {
		RequireApplied(t)(c.Process(ctx, "billing", msg(id), h))
	}
	x.age("billing", oldIDs, 10*24*time.Hour)
	// A message whose handler never committed keeps its entry: it
	// guards a replay of its dead letter.
	orphan := NewID()
	x.startStep("billing", orphan, "capture", old)
	newID := NewID()
	RequireApplied(t)(c.Process(ctx, "billing", msg(newID), h))

	n, err := c.Admin().Purge(ctx, inbox.PurgeParams{OlderThan: 5 * 24 * time.Hour, BatchSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	requireEqual(t, "purged", n, int64(3))
	for _, id := range oldIDs {
		requireEqual(t, "entries of a purged message", len(x.entries(c, inboxtype.EffectListParams{MessageID: id})), 0)
	}
	requireEqual(t, "entries of the new message", len(x.entries(c, inboxtype.EffectListParams{MessageID: newID})), 1)
	requireEqual(t, "entries of the orphan", len(x.entries(c, inboxtype.EffectListParams{MessageID: orphan})), 1)
}
