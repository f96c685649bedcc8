package inboxtest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxtype"
)

// ExerciseEffects runs the conformance suite of the effects ledger
// (inboxdriver.EffectStore) and of inbox.Client.Effect over it. The store's
// Driver must implement inboxdriver.EffectStore, over migrated tables.
// newStore is called once for each subtest, as for Exercise, and subtests
// run in parallel.
func ExerciseEffects[TTx any](t *testing.T, newStore func(t *testing.T) *Store[TTx]) {
	for _, c := range effectCases[TTx]() {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t)
			if _, ok := s.Driver.(inboxdriver.EffectStore); !ok {
				t.Fatalf("%T does not implement inboxdriver.EffectStore", s.Driver)
			}
			c.run(t, &suite[TTx]{t: t, s: s})
		})
	}
}

// remote is a fake remote call that counts its calls and the keys they
// carried, and returns a result derived from the key.
type remote struct {
	mu   sync.Mutex
	keys []string
	// fail, when set, is returned by the next call, which then does not
	// count as applied.
	fail error
}

func (r *remote) call(ctx context.Context, key string) ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ctxKey, ok := inbox.EffectKeyFromContext(ctx); !ok || ctxKey != key {
		return nil, fmt.Errorf("the call's context carries key %q, want %q", ctxKey, key)
	}
	r.keys = append(r.keys, key)
	if err := r.fail; err != nil {
		r.fail = nil
		return nil, err
	}
	return []byte(fmt.Sprintf("result-%d", len(r.keys))), nil
}

func (r *remote) calls() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.keys...)
}

// effectHandler returns a handler that runs step through Effect with opts,
// applies the store's effect, and keeps the last result.
func (x *suite[TTx]) effectHandler(c *inbox.Client[TTx], r *remote, step string, opts *inbox.EffectOpts, consumer string) (inbox.Handler[TTx], *atomic.Value) {
	var last atomic.Value
	return inbox.HandlerFunc[TTx](func(ctx context.Context, tx TTx, m inbox.Message) error {
		res, err := c.Effect(ctx, m, step, r.call, opts)
		if err != nil {
			return err
		}
		last.Store(string(res))
		return x.s.Effect(ctx, tx, consumer, m.ID)
	}), &last
}

func (x *suite[TTx]) effectStore() inboxdriver.EffectStore {
	return x.s.Driver.(inboxdriver.EffectStore)
}

// startStep leaves step started, as a process that died during its call
// does.
func (x *suite[TTx]) startStep(consumer, id, step string, at time.Time) {
	x.t.Helper()
	_, started, err := x.effectStore().EffectBegin(context.Background(), &inboxdriver.EffectBeginParams{
		EffectKeyParams: inboxdriver.EffectKeyParams{Consumer: consumer, ID: id, Step: step}, Now: at,
	})
	if err != nil {
		x.t.Fatalf("EffectBegin: %v", err)
	}
	requireEqual(x.t, "started a new step", started, true)
}

func (x *suite[TTx]) entries(c *inbox.Client[TTx], p inboxtype.EffectListParams) []*inboxtype.EffectEntry {
	x.t.Helper()
	es, err := c.Admin().EffectList(context.Background(), p)
	if err != nil {
		x.t.Fatalf("EffectList: %v", err)
	}
	return es
}

func (x *suite[TTx]) entry(c *inbox.Client[TTx], consumer, id, step string) *inboxtype.EffectEntry {
	x.t.Helper()
	for _, e := range x.entries(c, inboxtype.EffectListParams{Consumer: consumer, MessageID: id}) {
		if e.Step == step {
			return e
		}
	}
	x.t.Fatalf("no ledger entry for %s/%s/%s", consumer, id, step)
	return nil
}

func requireKeys(t *testing.T, r *remote, want ...string) {
	t.Helper()
	requireEqual(t, "keys of the calls", strings.Join(r.calls(), " "), strings.Join(want, " "))
}

func effectCases[TTx any]() []testCase[TTx] {
	return []testCase[TTx]{
		{"EffectCallsOnceAndStoresResult", func(t *testing.T, x *suite[TTx]) {
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
		}},

		{"EffectDoneSurvivesRollback", func(t *testing.T, x *suite[TTx]) {
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
		}},

		{"EffectStartedIsCalledAgainWithSameKey", func(t *testing.T, x *suite[TTx]) {
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
		}},

		{"EffectStartedNonIdempotentIsUnknownOutcome", func(t *testing.T, x *suite[TTx]) {
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
		}},

		{"EffectResolvedFailedIsCalledAgain", func(t *testing.T, x *suite[TTx]) {
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
		}},

		{"EffectNoEffectErrorAllowsAnotherCall", func(t *testing.T, x *suite[TTx]) {
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
		}},

		{"EffectErrorLeavesOutcomeUnknown", func(t *testing.T, x *suite[TTx]) {
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
		}},

		{"EffectPerConsumer", func(t *testing.T, x *suite[TTx]) {
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
		}},

		{"EffectInBatch", func(t *testing.T, x *suite[TTx]) {
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
		}},

		{"EffectRejectsBadInput", func(t *testing.T, x *suite[TTx]) {
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
		}},

		{"EffectWithClaimTx", func(t *testing.T, x *suite[TTx]) {
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
		}},

		{"EffectForget", func(t *testing.T, x *suite[TTx]) {
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
		}},

		{"EffectPurge", func(t *testing.T, x *suite[TTx]) {
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
		}},
	}
}
