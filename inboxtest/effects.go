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
		{"EffectCallsOnceAndStoresResult", testEffectCallsOnceAndStoresResult[TTx]},
		{"EffectDoneSurvivesRollback", testEffectDoneSurvivesRollback[TTx]},
		{"EffectStartedIsCalledAgainWithSameKey", testEffectStartedIsCalledAgainWithSameKey[TTx]},
		{"EffectStartedNonIdempotentIsUnknownOutcome", testEffectStartedNonIdempotentIsUnknownOutcome[TTx]},
		{"EffectResolvedFailedIsCalledAgain", testEffectResolvedFailedIsCalledAgain[TTx]},
		{"EffectNoEffectErrorAllowsAnotherCall", testEffectNoEffectErrorAllowsAnotherCall[TTx]},
		{"EffectErrorLeavesOutcomeUnknown", testEffectErrorLeavesOutcomeUnknown[TTx]},
		{"EffectPerConsumer", testEffectPerConsumer[TTx]},
		{"EffectInBatch", testEffectInBatch[TTx]},
		{"EffectRejectsBadInput", testEffectRejectsBadInput[TTx]},
		{"EffectWithClaimTx", testEffectWithClaimTx[TTx]},
		{"EffectForget", testEffectForget[TTx]},
		{"EffectPurge", testEffectPurge[TTx]},
	}
}
