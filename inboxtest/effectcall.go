package inboxtest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxtype"
)

func testEffectCallsOnceAndStoresResult[TTx any](t *testing.T, x *suite[TTx]) {
	c := x.client(nil)
	r := &remote{}
	id := NewID()
	var results []string
	h := inbox.HandlerFunc[TTx](func(ctx context.Context, tx TTx, m inbox.Message) error {
		for _, step := range []string{"capture", "capture", "notify"} {
			res, err := c.Effect(ctx, m, step, r.call, nil)
			if err != nil {
				return err
			}
			results = append(results, string(res))
		}
		return x.s.Effect(ctx, tx, "billing", m.ID)
	})
	RequireApplied(t)(c.Process(context.Background(), "billing", msg(id), h))
	RequireDuplicate(t)(c.Process(context.Background(), "billing", msg(id), h))
	requireKeys(t, r, inbox.EffectKey("billing", id, "capture"), inbox.EffectKey("billing", id, "notify"))
	requireEqual(t, "results", strings.Join(results, ","), "result-1,result-1,result-2")
	for _, step := range []string{"capture", "notify"} {
		e := x.entry(c, "billing", id, step)
		requireEqual(t, step+" state", e.State, inboxtype.EffectDone)
		requireEqual(t, step+" attempts", e.Attempts, 1)
		if e.DoneAt.IsZero() || e.StartedAt.IsZero() || e.DoneAt.Before(e.StartedAt) {
			t.Fatalf("%s: started %v, done %v", step, e.StartedAt, e.DoneAt)
		}
	}
	x.requireEffects("billing", id, 1)
}

func testEffectDoneSurvivesRollback[TTx any](t *testing.T, x *suite[TTx]) {
	// The handler's transaction rolls back after the call; the
	// redelivery gets the stored result and does not call again.
	c := x.client(nil)
	r := &remote{}
	id := NewID()
	failing := inbox.HandlerFunc[TTx](func(ctx context.Context, tx TTx, m inbox.Message) error {
		if _, err := c.Effect(ctx, m, "capture", r.call, &inbox.EffectOpts{NonIdempotent: true}); err != nil {
			return err
		}
		if err := x.s.Effect(ctx, tx, "billing", m.ID); err != nil {
			return err
		}
		return errBoom
	})
	_, err := c.Process(context.Background(), "billing", msg(id), failing)
	requireErrorIs(t, err, errBoom)
	x.requireEffects("billing", id, 0)
	h, last := x.effectHandler(c, r, "capture", &inbox.EffectOpts{NonIdempotent: true}, "billing")
	RequireApplied(t)(c.Process(context.Background(), "billing", msg(id), h))
	requireKeys(t, r, inbox.EffectKey("billing", id, "capture"))
	requireEqual(t, "stored result", last.Load(), any("result-1"))
	x.requireEffects("billing", id, 1)
}

func testEffectStartedIsCalledAgainWithSameKey[TTx any](t *testing.T, x *suite[TTx]) {
	c := x.client(nil)
	r := &remote{}
	id := NewID()
	x.startStep("billing", id, "capture", time.Now())
	h, last := x.effectHandler(c, r, "capture", nil, "billing")
	RequireApplied(t)(c.Process(context.Background(), "billing", msg(id), h))
	requireKeys(t, r, inbox.EffectKey("billing", id, "capture"))
	requireEqual(t, "result", last.Load(), any("result-1"))
	e := x.entry(c, "billing", id, "capture")
	requireEqual(t, "state", e.State, inboxtype.EffectDone)
	requireEqual(t, "attempts", e.Attempts, 2)
	requireEqual(t, "result", string(e.Result), "result-1")
}

func testEffectStartedNonIdempotentIsUnknownOutcome[TTx any](t *testing.T, x *suite[TTx]) {
	now := time.Now().UTC().Truncate(time.Millisecond)
	c := x.client(&inbox.Config{Now: func() time.Time { return now }})
	r := &remote{}
	id := NewID()
	started := now.Add(-time.Hour)
	x.startStep("billing", id, "capture", started)
	h, last := x.effectHandler(c, r, "capture", &inbox.EffectOpts{NonIdempotent: true}, "billing")
	for range 2 {
		_, err := c.Process(context.Background(), "billing", msg(id), h)
		requireErrorIs(t, err, inbox.ErrUnknownOutcome)
		if !inbox.IsPermanent(err) || inbox.IsRetryable(err) {
			t.Fatalf("an unknown outcome must be permanent: %v", err)
		}
		requireEqual(t, "dead-letter reason", inbox.DeadLetterReason(err), inbox.ReasonUnknownOutcome)
	}
	requireKeys(t, r)
	x.requireEffects("billing", id, 0)
	e := x.entry(c, "billing", id, "capture")
	requireEqual(t, "state", e.State, inboxtype.EffectStarted)
	requireEqual(t, "attempts", e.Attempts, 1)
	if !e.StartedAt.Equal(started) {
		t.Fatalf("started at %v, want %v", e.StartedAt, started)
	}

	// Stuck steps: started and not done, before a cutoff.
	stuck := x.entries(c, inboxtype.EffectListParams{State: inboxtype.EffectStarted, StartedBefore: now.Add(-time.Minute)})
	requireEqual(t, "stuck steps", len(stuck), 1)
	requireEqual(t, "stuck id", stuck[0].MessageID, id)
	requireEqual(t, "stuck steps before the start", len(x.entries(c, inboxtype.EffectListParams{
		State: inboxtype.EffectStarted, StartedBefore: started})), 0)
	requireEqual(t, "done steps", len(x.entries(c, inboxtype.EffectListParams{State: inboxtype.EffectDone})), 0)

	// An operator finds the capture at the provider and settles the
	// step as done, with the provider's result.
	err := c.Admin().EffectResolve(context.Background(), inbox.EffectResolveParams{
		Consumer: "billing", MessageID: strings.ToUpper(id), Step: "capture", State: inboxtype.EffectDone, Result: []byte("cap_42")})
	if err != nil {
		t.Fatal(err)
	}
	RequireApplied(t)(c.Process(context.Background(), "billing", msg(id), h))
	requireKeys(t, r)
	requireEqual(t, "result", last.Load(), any("cap_42"))
	requireErrorIs(t, c.Admin().EffectResolve(context.Background(), inbox.EffectResolveParams{
		Consumer: "billing", MessageID: id, Step: "capture", State: inboxtype.EffectFailed}), inbox.ErrNotFound)
}

func testEffectResolvedFailedIsCalledAgain[TTx any](t *testing.T, x *suite[TTx]) {
	c := x.client(nil)
	r := &remote{}
	id := NewID()
	x.startStep("billing", id, "capture", time.Now())
	if err := c.Admin().EffectResolve(context.Background(), inbox.EffectResolveParams{
		Consumer: "billing", MessageID: id, Step: "capture", State: inboxtype.EffectFailed}); err != nil {
		t.Fatal(err)
	}
	requireEqual(t, "state", x.entry(c, "billing", id, "capture").State, inboxtype.EffectFailed)
	h, _ := x.effectHandler(c, r, "capture", &inbox.EffectOpts{NonIdempotent: true}, "billing")
	RequireApplied(t)(c.Process(context.Background(), "billing", msg(id), h))
	requireKeys(t, r, inbox.EffectKey("billing", id, "capture"))
	requireEqual(t, "attempts", x.entry(c, "billing", id, "capture").Attempts, 2)
	err := c.Admin().EffectResolve(context.Background(), inbox.EffectResolveParams{
		Consumer: "billing", MessageID: id, Step: "capture", State: inboxtype.EffectStarted})
	if err == nil || !strings.Contains(err.Error(), "State") {
		t.Fatalf("resolving to started should be refused, naming the field: %v", err)
	}
}

func testEffectNoEffectErrorAllowsAnotherCall[TTx any](t *testing.T, x *suite[TTx]) {
	c := x.client(nil)
	r := &remote{fail: inbox.NoEffect(errBoom)}
	id := NewID()
	h, _ := x.effectHandler(c, r, "capture", &inbox.EffectOpts{NonIdempotent: true}, "billing")
	_, err := c.Process(context.Background(), "billing", msg(id), h)
	requireErrorIs(t, err, errBoom)
	if !inbox.IsRetryable(err) {
		t.Fatalf("a failed call is retryable: %v", err)
	}
	requireEqual(t, "state", x.entry(c, "billing", id, "capture").State, inboxtype.EffectFailed)
	RequireApplied(t)(c.Process(context.Background(), "billing", msg(id), h))
	key := inbox.EffectKey("billing", id, "capture")
	requireKeys(t, r, key, key)
	e := x.entry(c, "billing", id, "capture")
	requireEqual(t, "state", e.State, inboxtype.EffectDone)
	requireEqual(t, "attempts", e.Attempts, 2)
}

func testEffectErrorLeavesOutcomeUnknown[TTx any](t *testing.T, x *suite[TTx]) {
	c := x.client(nil)
	r := &remote{fail: errBoom}
	id := NewID()
	h, _ := x.effectHandler(c, r, "capture", &inbox.EffectOpts{NonIdempotent: true}, "billing")
	_, err := c.Process(context.Background(), "billing", msg(id), h)
	requireErrorIs(t, err, errBoom)
	requireEqual(t, "state", x.entry(c, "billing", id, "capture").State, inboxtype.EffectStarted)
	_, err = c.Process(context.Background(), "billing", msg(id), h)
	requireErrorIs(t, err, inbox.ErrUnknownOutcome)
	requireKeys(t, r, inbox.EffectKey("billing", id, "capture"))

	// Declared idempotent, the same step is called again instead.
	idem, _ := x.effectHandler(c, r, "capture", nil, "billing")
	RequireApplied(t)(c.Process(context.Background(), "billing", msg(id), idem))
	key := inbox.EffectKey("billing", id, "capture")
	requireKeys(t, r, key, key)
}
