package inboxtest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxtype"
)

// Store is what the conformance suite needs of a store under test.
type Store[TTx any] struct {
	// Driver is the store, over tables that no other test touches, already
	// migrated.
	Driver inboxdriver.Driver[TTx]
	// Begin begins a transaction, as an application does before ClaimTx.
	Begin func(ctx context.Context) (TTx, error)
	// Effect applies the side effect of one message inside tx: it records
	// one application of id for consumer in a table of its own.
	Effect func(ctx context.Context, tx TTx, consumer, id string) error
	// Effects counts the recorded applications of id for consumer.
	Effects func(ctx context.Context, consumer, id string) (int, error)
	// WaitingClaims, if set, counts the claims of these tables that are
	// waiting for a lock. It lets the suite check that a concurrent
	// duplicate really waited behind the first delivery.
	WaitingClaims func(ctx context.Context) (int, error)
	// Age, if set, moves the processed_at of consumer's inbox rows of ids
	// back by d, as if they had been processed d earlier. The store stamps
	// processed_at with the database's clock, which no client setting
	// moves, so the purge cases age rows this way. Defaults to AgeRows
	// over Driver.
	Age func(ctx context.Context, consumer string, ids []string, d time.Duration) error
}

// Exercise runs the conformance suite. newStore is called once for each
// subtest and must return a store isolated from every other. Subtests run in
// parallel.
func Exercise[TTx any](t *testing.T, newStore func(t *testing.T) *Store[TTx]) {
	exercise(t, newStore, append(append(append(cases[TTx](), takeoverCases[TTx]()...), outboxCases[TTx]()...), catalogCases[TTx]()...))
}

// ExercisePartitioned runs the conformance suite, and the cases of the
// partitioned layout, on a store whose inbox is in that layout
// (inboxdriver.LayoutPartitioned), with partitions made by its migration.
func ExercisePartitioned[TTx any](t *testing.T, newStore func(t *testing.T) *Store[TTx]) {
	all := append(append(append(cases[TTx](), takeoverCases[TTx]()...), outboxCases[TTx]()...), catalogCases[TTx]()...)
	exercise(t, newStore, append(all, partitionCases[TTx]()...))
}

func exercise[TTx any](t *testing.T, newStore func(t *testing.T) *Store[TTx], tcs []testCase[TTx]) {
	for _, c := range tcs {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t)
			c.run(t, &suite[TTx]{t: t, s: s})
		})
	}
}

type testCase[TTx any] struct {
	name string
	run  func(t *testing.T, x *suite[TTx])
}

// suite holds one subtest's store and builds its clients.
type suite[TTx any] struct {
	t *testing.T
	s *Store[TTx]
}

func (x *suite[TTx]) client(cfg *inbox.Config) *inbox.Client[TTx] {
	x.t.Helper()
	c, err := inbox.NewClient(x.s.Driver, cfg)
	if err != nil {
		x.t.Fatalf("NewClient: %v", err)
	}
	return c
}

// effect returns a handler that applies the store's effect and counts its
// calls, in order.
func (x *suite[TTx]) effect(consumer string) (inbox.Handler[TTx], *calls) {
	cs := &calls{}
	return inbox.HandlerFunc[TTx](func(ctx context.Context, tx TTx, m inbox.Message) error {
		cs.add(m.ID)
		return x.s.Effect(ctx, tx, consumer, m.ID)
	}), cs
}

func (x *suite[TTx]) requireEffects(consumer, id string, want int) {
	x.t.Helper()
	got, err := x.s.Effects(context.Background(), consumer, id)
	if err != nil {
		x.t.Fatalf("count effects: %v", err)
	}
	if got != want {
		x.t.Fatalf("%s/%s applied %d times, want %d", consumer, id, got, want)
	}
}

// age ages consumer's rows of ids by d with the store's Age.
func (x *suite[TTx]) age(consumer string, ids []string, d time.Duration) {
	x.t.Helper()
	age := x.s.Age
	if age == nil {
		age = func(ctx context.Context, consumer string, ids []string, d time.Duration) error {
			return AgeRows(ctx, x.s.Driver, consumer, ids, d)
		}
	}
	if err := age(context.Background(), consumer, ids, d); err != nil {
		x.t.Fatalf("age %s rows by %v: %v", consumer, d, err)
	}
}

func (x *suite[TTx]) rows(c *inbox.Client[TTx], consumer string) int64 {
	x.t.Helper()
	st, err := c.Admin().Stats(context.Background())
	if err != nil {
		x.t.Fatalf("Stats: %v", err)
	}
	for _, cs := range st.Consumers {
		if cs.Consumer == consumer {
			return cs.Rows
		}
	}
	return 0
}

type calls struct {
	mu  sync.Mutex
	ids []string
}

func (c *calls) add(id string) {
	c.mu.Lock()
	c.ids = append(c.ids, id)
	c.mu.Unlock()
}

func (c *calls) list() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.ids...)
}

func msg(id string) inbox.Message {
	return inbox.Message{ID: id, Payload: []byte(`{"amount_cents":100}`)}
}

func requireErrorIs(t *testing.T, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("want an error wrapping %q, got %v", target, err)
	}
}

func requireEqual[T comparable](t *testing.T, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Fatalf("%s: got %v, want %v", what, got, want)
	}
}

func requireOutcomes(t *testing.T, rs []inbox.BatchResult, want ...any) {
	t.Helper()
	if len(rs) != len(want) {
		t.Fatalf("got %d results, want %d", len(rs), len(want))
	}
	for i, w := range want {
		switch w := w.(type) {
		case inbox.Outcome:
			if rs[i].Err != nil || rs[i].Outcome != w {
				t.Fatalf("result %d: got (%v, %v), want %v", i, rs[i].Outcome, rs[i].Err, w)
			}
		case error:
			if !errors.Is(rs[i].Err, w) {
				t.Fatalf("result %d: got (%v, %v), want an error wrapping %q", i, rs[i].Outcome, rs[i].Err, w)
			}
		}
	}
}

var errBoom = errors.New("boom")

func cases[TTx any]() []testCase[TTx] {
	return []testCase[TTx]{
		{"ApplyThenSkipDuplicate", testApplyThenSkipDuplicate[TTx]},
		{"CanonicalIDsAreOneMessage", testCanonicalIDsAreOneMessage[TTx]},
		{"HandlerErrorRollsBack", testHandlerErrorRollsBack[TTx]},
		{"HandlerPanicRollsBack", testHandlerPanicRollsBack[TTx]},
		{"ConcurrentDuplicates", testConcurrentDuplicates[TTx]},
		{"DuplicateWaitsThenApplies", testDuplicateWaitsThenApplies[TTx]},
		{"LockTimeout", testLockTimeout[TTx]},
		{"PerConsumer", testPerConsumer[TTx]},
		{"ClaimTx", testClaimTx[TTx]},
		{"ErrorsSayOnceWhere", testErrorsSayOnceWhere[TTx]},
		{"BatchDuplicatesInsideAndAcross", testBatchDuplicatesInsideAndAcross[TTx]},
		{"BatchIsolatesPoison", testBatchIsolatesPoison[TTx]},
		{"BatchHandler", testBatchHandler[TTx]},
		{"BatchRejectsBadIDs", testBatchRejectsBadIDs[TTx]},
		{"PurgeWindowAndHorizon", testPurgeWindowAndHorizon[TTx]},
		{"PurgeUsesTheStoresClock", testPurgeUsesTheStoresClock[TTx]},
		{"PurgeByConsumer", testPurgeByConsumer[TTx]},
		{"Cleaner", testCleaner[TTx]},
		{"ForgetAllowsOneMoreApply", testForgetAllowsOneMoreApply[TTx]},
		{"InvalidInputBeforeSQL", testInvalidInputBeforeSQL[TTx]},
		{"DeadLetters", testDeadLetters[TTx]},
		{"ReplayMarkedDeadLetters", testReplayMarkedDeadLetters[TTx]},
		{"ReplayDryRunMarksNothing", testReplayDryRunMarksNothing[TTx]},
		{"ConcurrentReplays", testConcurrentReplays[TTx]},
	}
}

// awaitWaitingClaim waits until a claim is blocked on a lock, when the
// store can tell.
func (x *suite[TTx]) awaitWaitingClaim(t *testing.T) {
	t.Helper()
	if x.s.WaitingClaims == nil {
		return
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, err := x.s.WaitingClaims(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the second delivery never waited for the first")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// countingDriver counts every call that could reach the store.
type countingDriver[TTx any] struct {
	inboxdriver.Driver[TTx]
	calls atomic.Int64
}

func (d *countingDriver[TTx]) BeginClaim(ctx context.Context, p *inboxdriver.ClaimParams) (TTx, []bool, error) {
	d.calls.Add(1)
	return d.Driver.BeginClaim(ctx, p)
}

func (d *countingDriver[TTx]) Claim(ctx context.Context, tx TTx, p *inboxdriver.ClaimParams) ([]bool, error) {
	d.calls.Add(1)
	return d.Driver.Claim(ctx, tx, p)
}

func (d *countingDriver[TTx]) Forget(ctx context.Context, p *inboxdriver.ForgetParams) (bool, error) {
	d.calls.Add(1)
	return d.Driver.Forget(ctx, p)
}

func (d *countingDriver[TTx]) ForgetCount(ctx context.Context, p *inboxdriver.ForgetParams) (inboxtype.ForgetCounts, error) {
	d.calls.Add(1)
	return d.Driver.ForgetCount(ctx, p)
}
