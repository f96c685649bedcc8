package inboxtest

import (
	"context"
	"errors"
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
		{"ApplyThenSkipDuplicate", func(t *testing.T, x *suite[TTx]) {
			c := x.client(nil)
			h, cs := x.effect("billing")
			id := NewID()
			RequireApplied(t)(c.Process(context.Background(), "billing", msg(id), h))
			RequireDuplicate(t)(c.Process(context.Background(), "billing", msg(id), h))
			requireEqual(t, "handler calls", len(cs.list()), 1)
			x.requireEffects("billing", id, 1)
		}},

		{"CanonicalIDsAreOneMessage", func(t *testing.T, x *suite[TTx]) {
			c := x.client(nil)
			h, cs := x.effect("billing")
			id := NewID()
			for i, form := range []string{id, strings.ToUpper(id), "{" + id + "}", "urn:uuid:" + id, strings.ReplaceAll(id, "-", "")} {
				out, err := c.Process(context.Background(), "billing", msg(form), h)
				if err != nil {
					t.Fatalf("form %q: %v", form, err)
				}
				want := inbox.Duplicate
				if i == 0 {
					want = inbox.Applied
				}
				requireEqual(t, "outcome of "+form, out, want)
			}
			requireEqual(t, "handler calls", len(cs.list()), 1)
			requireEqual(t, "id the handler saw", cs.list()[0], id)
		}},

		{"HandlerErrorRollsBack", func(t *testing.T, x *suite[TTx]) {
			c := x.client(nil)
			id := NewID()
			failing := inbox.HandlerFunc[TTx](func(ctx context.Context, tx TTx, m inbox.Message) error {
				if err := x.s.Effect(ctx, tx, "billing", m.ID); err != nil {
					return err
				}
				return errBoom
			})
			_, err := c.Process(context.Background(), "billing", msg(id), failing)
			requireErrorIs(t, err, errBoom)
			x.requireEffects("billing", id, 0)
			requireEqual(t, "inbox rows after the rollback", x.rows(c, "billing"), 0)

			h, _ := x.effect("billing")
			RequireApplied(t)(c.Process(context.Background(), "billing", msg(id), h))
			x.requireEffects("billing", id, 1)
		}},

		{"HandlerPanicRollsBack", func(t *testing.T, x *suite[TTx]) {
			c := x.client(nil)
			id := NewID()
			panicking := inbox.HandlerFunc[TTx](func(ctx context.Context, tx TTx, m inbox.Message) error {
				if err := x.s.Effect(ctx, tx, "billing", m.ID); err != nil {
					return err
				}
				panic("handler bug")
			})
			_, err := c.Process(context.Background(), "billing", msg(id), panicking)
			var pe *inbox.PanicError
			if !errors.As(err, &pe) {
				t.Fatalf("want a PanicError, got %v", err)
			}
			if !inbox.IsRetryable(err) {
				t.Fatalf("a panic should be retryable, so that it uses up attempts: %v", err)
			}
			x.requireEffects("billing", id, 0)
			h, _ := x.effect("billing")
			RequireApplied(t)(c.Process(context.Background(), "billing", msg(id), h))
		}},

		{"ConcurrentDuplicates", func(t *testing.T, x *suite[TTx]) {
			c := x.client(&inbox.Config{LockTimeout: -1, MaxConflictRetries: 50})
			h, cs := x.effect("billing")
			id := NewID()
			const n = 32
			start := make(chan struct{})
			var applied, duplicate atomic.Int32
			errs := make(chan error, n)
			var wg sync.WaitGroup
			for range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					out, err := c.Process(context.Background(), "billing", msg(id), h)
					switch {
					case err != nil:
						errs <- err
					case out == inbox.Applied:
						applied.Add(1)
					case out == inbox.Duplicate:
						duplicate.Add(1)
					}
				}()
			}
			close(start)
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatalf("concurrent delivery failed: %v", err)
			}
			requireEqual(t, "applied", applied.Load(), 1)
			requireEqual(t, "duplicates", duplicate.Load(), n-1)
			requireEqual(t, "handler calls", len(cs.list()), 1)
			x.requireEffects("billing", id, 1)
		}},

		{"DuplicateWaitsThenApplies", func(t *testing.T, x *suite[TTx]) {
			// The first delivery claims and then rolls back; the
			// concurrent second must then claim and apply.
			c := x.client(&inbox.Config{LockTimeout: -1, MaxConflictRetries: 50})
			id := NewID()
			claimed := make(chan struct{})
			release := make(chan struct{})
			first := inbox.HandlerFunc[TTx](func(ctx context.Context, tx TTx, m inbox.Message) error {
				close(claimed)
				<-release
				return errBoom
			})
			firstErr := make(chan error, 1)
			go func() {
				_, err := c.Process(context.Background(), "billing", msg(id), first)
				firstErr <- err
			}()
			<-claimed
			h, cs := x.effect("billing")
			second := make(chan error, 1)
			var outcome inbox.Outcome
			go func() {
				var err error
				outcome, err = c.Process(context.Background(), "billing", msg(id), h)
				second <- err
			}()
			x.awaitWaitingClaim(t)
			close(release)
			requireErrorIs(t, <-firstErr, errBoom)
			if err := <-second; err != nil {
				t.Fatalf("second delivery: %v", err)
			}
			requireEqual(t, "second outcome", outcome, inbox.Applied)
			requireEqual(t, "handler calls", len(cs.list()), 1)
			x.requireEffects("billing", id, 1)
		}},

		{"LockTimeout", func(t *testing.T, x *suite[TTx]) {
			// A duplicate behind a long in-flight first delivery gives up
			// with a retryable error instead of blocking without limit.
			slow := x.client(&inbox.Config{LockTimeout: -1})
			impatient := x.client(&inbox.Config{LockTimeout: 50 * time.Millisecond, MaxConflictRetries: -1})
			id := NewID()
			claimed := make(chan struct{})
			release := make(chan struct{})
			first := inbox.HandlerFunc[TTx](func(ctx context.Context, tx TTx, m inbox.Message) error {
				close(claimed)
				<-release
				return x.s.Effect(ctx, tx, "billing", m.ID)
			})
			firstOut := make(chan error, 1)
			go func() {
				out, err := slow.Process(context.Background(), "billing", msg(id), first)
				if err == nil && out != inbox.Applied {
					err = fmt.Errorf("first delivery: %v", out)
				}
				firstOut <- err
			}()
			<-claimed
			h, cs := x.effect("billing")
			_, err := impatient.Process(context.Background(), "billing", msg(id), h)
			requireErrorIs(t, err, inbox.ErrLockTimeout)
			if !inbox.IsRetryable(err) {
				t.Fatalf("a lock timeout must be retryable: %v", err)
			}
			close(release)
			if err := <-firstOut; err != nil {
				t.Fatal(err)
			}
			RequireDuplicate(t)(impatient.Process(context.Background(), "billing", msg(id), h))
			requireEqual(t, "second handler calls", len(cs.list()), 0)
			x.requireEffects("billing", id, 1)
		}},

		{"PerConsumer", func(t *testing.T, x *suite[TTx]) {
			c := x.client(nil)
			id := NewID()
			for _, consumer := range []string{"billing", "inventory"} {
				h, _ := x.effect(consumer)
				RequireApplied(t)(c.Process(context.Background(), consumer, msg(id), h))
			}
			for _, consumer := range []string{"billing", "inventory"} {
				h, cs := x.effect(consumer)
				RequireDuplicate(t)(c.Process(context.Background(), consumer, msg(id), h))
				requireEqual(t, consumer+" handler calls on redelivery", len(cs.list()), 0)
				x.requireEffects(consumer, id, 1)
			}
		}},

		{"ClaimTx", func(t *testing.T, x *suite[TTx]) {
			c := x.client(nil)
			id := NewID()
			ctx := context.Background()
			for i, want := range []inbox.Outcome{inbox.Applied, inbox.Duplicate} {
				tx, err := x.s.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				out, err := c.ClaimTx(ctx, tx, "billing", msg(id))
				if err != nil {
					t.Fatalf("delivery %d: %v", i, err)
				}
				requireEqual(t, "outcome", out, want)
				if out == inbox.Applied {
					if err := x.s.Effect(ctx, tx, "billing", id); err != nil {
						t.Fatal(err)
					}
					if err := x.s.Driver.Commit(ctx, tx); err != nil {
						t.Fatal(err)
					}
				} else if err := x.s.Driver.Rollback(ctx, tx); err != nil {
					t.Fatal(err)
				}
			}
			x.requireEffects("billing", id, 1)
		}},

		{"ErrorsSayOnceWhere", func(t *testing.T, x *suite[TTx]) {
			c := x.client(nil)
			ctx := context.Background()
			boom := inbox.HandlerFunc[TTx](func(context.Context, TTx, inbox.Message) error { return errors.New("boom") })
			id := NewID()
			_, err := c.Process(ctx, "billing", msg(id), boom)
			requireEqual(t, "handler failure", fmt.Sprint(err), "inbox: handler billing/"+id+": boom")
			requireEqual(t, "judged", inbox.Judge(err), inbox.FaultMessage)
			ok, bad := NewID(), NewID()
			poison := inbox.HandlerFunc[TTx](func(_ context.Context, _ TTx, m inbox.Message) error {
				if m.ID == bad {
					return inbox.Permanent(errors.New("bad payload"))
				}
				return nil
			})
			rs, err := c.ProcessBatch(ctx, "billing", []inbox.Message{msg(ok), msg(bad)}, poison)
			if err != nil {
				t.Fatal(err)
			}
			requireEqual(t, "batch-mate", rs[0].Err, nil)
			requireEqual(t, "poison", fmt.Sprint(rs[1].Err), "inbox: handler billing/"+bad+": permanent: bad payload")
			requireEqual(t, "poison judged", inbox.Judge(rs[1].Err), inbox.FaultPermanent)
		}},

		{"BatchDuplicatesInsideAndAcross", func(t *testing.T, x *suite[TTx]) {
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
		}},

		{"BatchIsolatesPoison", func(t *testing.T, x *suite[TTx]) {
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
		}},

		{"BatchHandler", func(t *testing.T, x *suite[TTx]) {
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
		}},

		{"BatchRejectsBadIDs", func(t *testing.T, x *suite[TTx]) {
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
		}},

		{"PurgeWindowAndHorizon", func(t *testing.T, x *suite[TTx]) {
			c := x.client(&inbox.Config{ReplayHorizon: 24 * time.Hour})
			h, _ := x.effect("billing")
			ctx := context.Background()
			var oldIDs, newIDs []string
			for range 5 {
				id := NewID()
				oldIDs = append(oldIDs, id)
				RequireApplied(t)(c.Process(ctx, "billing", msg(id), h))
			}
			x.age("billing", oldIDs, 10*24*time.Hour)
			for range 3 {
				id := NewID()
				newIDs = append(newIDs, id)
				RequireApplied(t)(c.Process(ctx, "billing", msg(id), h))
			}

			_, err := c.Admin().Purge(ctx, inbox.PurgeParams{OlderThan: 12 * time.Hour})
			requireErrorIs(t, err, inbox.ErrWindowTooShort)
			if !strings.Contains(err.Error(), "12h") || !strings.Contains(err.Error(), "1d") {
				t.Fatalf("the refusal should name the window and the horizon: %v", err)
			}

			n, err := c.Admin().Purge(ctx, inbox.PurgeParams{OlderThan: 5 * 24 * time.Hour, DryRun: true})
			if err != nil {
				t.Fatal(err)
			}
			requireEqual(t, "dry-run count", n, int64(5))
			requireEqual(t, "rows after a dry run", x.rows(c, "billing"), int64(8))

			var progress []int64
			n, err = c.Admin().Purge(ctx, inbox.PurgeParams{OlderThan: 5 * 24 * time.Hour, BatchSize: 2,
				Progress: func(d int64) { progress = append(progress, d) }})
			if err != nil {
				t.Fatal(err)
			}
			requireEqual(t, "purged", n, int64(5))
			requireEqual(t, "batches", fmt.Sprint(progress), "[2 4 5]")
			requireEqual(t, "rows left", x.rows(c, "billing"), int64(3))
			for _, id := range newIDs {
				RequireDuplicate(t)(c.Process(ctx, "billing", msg(id), h))
			}
			// Past the window a replay looks new: that is why the horizon
			// guard exists.
			RequireApplied(t)(c.Process(ctx, "billing", msg(oldIDs[0]), h))
		}},

		{"PurgeUsesTheStoresClock", func(t *testing.T, x *suite[TTx]) {
			// A consumer host whose clock is 20 days slow stamps nothing
			// with it: a 14-day purge finds its rows new, and a redelivery
			// is still a duplicate.
			slow := time.Now().Add(-20 * 24 * time.Hour)
			c := x.client(&inbox.Config{Now: func() time.Time { return slow }})
			h, _ := x.effect("billing")
			ctx := context.Background()
			id := NewID()
			RequireApplied(t)(c.Process(ctx, "billing", msg(id), h))
			RequireApplied(t)(c.Process(ctx, "billing", msg(NewID()), h))
			n, err := c.Admin().Purge(ctx, inbox.PurgeParams{OlderThan: inbox.DefaultReplayHorizon})
			if err != nil {
				t.Fatal(err)
			}
			requireEqual(t, "rows purged", n, int64(0))
			RequireDuplicate(t)(c.Process(ctx, "billing", msg(id), h))
			// A host 20 days fast places no cutoff either.
			fast := time.Now().Add(20 * 24 * time.Hour)
			c = x.client(&inbox.Config{Now: func() time.Time { return fast }})
			n, err = c.Admin().Purge(ctx, inbox.PurgeParams{OlderThan: inbox.DefaultReplayHorizon, DryRun: true})
			if err != nil {
				t.Fatal(err)
			}
			requireEqual(t, "rows a fast host would purge", n, int64(0))
			x.age("billing", []string{id}, 15*24*time.Hour)
			n, err = c.Admin().Purge(ctx, inbox.PurgeParams{OlderThan: inbox.DefaultReplayHorizon})
			if err != nil {
				t.Fatal(err)
			}
			requireEqual(t, "rows purged once 15 days old by the store's clock", n, int64(1))
			requireEqual(t, "rows left", x.rows(c, "billing"), int64(1))
		}},

		{"PurgeByConsumer", func(t *testing.T, x *suite[TTx]) {
			c := x.client(&inbox.Config{ReplayHorizon: time.Hour})
			ctx := context.Background()
			for _, consumer := range []string{"billing", "inventory"} {
				h, _ := x.effect(consumer)
				id := NewID()
				RequireApplied(t)(c.Process(ctx, consumer, msg(id), h))
				x.age(consumer, []string{id}, 48*time.Hour)
			}
			n, err := c.Admin().Purge(ctx, inbox.PurgeParams{OlderThan: 24 * time.Hour, Consumer: "inventory"})
			if err != nil {
				t.Fatal(err)
			}
			requireEqual(t, "purged", n, int64(1))
			requireEqual(t, "billing rows", x.rows(c, "billing"), int64(1))
			requireEqual(t, "inventory rows", x.rows(c, "inventory"), int64(0))
		}},

		{"Cleaner", func(t *testing.T, x *suite[TTx]) {
			if x.partitioned() {
				x.cleanerPartitioned(t)
				return
			}
			c := x.client(&inbox.Config{ReplayHorizon: time.Hour, Retention: 24 * time.Hour,
				CleanerInterval: 10 * time.Millisecond})
			h, _ := x.effect("billing")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			old := NewID()
			RequireApplied(t)(c.Process(ctx, "billing", msg(old), h))
			x.age("billing", []string{old}, 48*time.Hour)
			RequireApplied(t)(c.Process(ctx, "billing", msg(NewID()), h))

			// While another process holds the cleaner's lock, this one
			// skips its turns.
			tables := x.s.Driver.Tables()
			key := "inbox-cleaner:" + tables.Schema + "." + tables.Inbox
			held := make(chan struct{})
			releaseLock := make(chan struct{})
			lockDone := make(chan error, 1)
			go func() {
				_, err := x.s.Driver.WithLock(ctx, key, func(ctx context.Context) error {
					close(held)
					<-releaseLock
					return nil
				})
				lockDone <- err
			}()
			<-held
			ran, err := x.s.Driver.WithLock(ctx, key, func(ctx context.Context) error { return nil })
			if err != nil {
				t.Fatal(err)
			}
			requireEqual(t, "second holder ran", ran, false)
			close(releaseLock)
			if err := <-lockDone; err != nil {
				t.Fatal(err)
			}

			done := make(chan error, 1)
			go func() { done <- c.Admin().RunCleaner(ctx) }()
			deadline := time.Now().Add(30 * time.Second)
			for x.rows(c, "billing") != 1 {
				if time.Now().After(deadline) {
					t.Fatalf("the cleaner did not purge the old row within 30s")
				}
				time.Sleep(5 * time.Millisecond)
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}},

		{"ForgetAllowsOneMoreApply", func(t *testing.T, x *suite[TTx]) {
			c := x.client(nil)
			h, cs := x.effect("billing")
			ctx := context.Background()
			id := NewID()
			RequireApplied(t)(c.Process(ctx, "billing", msg(id), h))
			// A dry run counts the row, and deletes nothing.
			for range 2 {
				n, err := c.Admin().ForgetCount(ctx, "billing", strings.ToUpper(id))
				requireEqual(t, "forget count error", err, nil)
				requireEqual(t, "inbox rows to forget", n.InboxRows, int64(1))
			}
			RequireDuplicate(t)(c.Process(ctx, "billing", msg(id), h))
			if err := c.Admin().Forget(ctx, "billing", strings.ToUpper(id)); err != nil {
				t.Fatal(err)
			}
			RequireApplied(t)(c.Process(ctx, "billing", msg(id), h))
			RequireDuplicate(t)(c.Process(ctx, "billing", msg(id), h))
			requireEqual(t, "handler calls", len(cs.list()), 2)
			x.requireEffects("billing", id, 2)
			requireErrorIs(t, c.Admin().Forget(ctx, "billing", NewID()), inbox.ErrNotFound)
			requireErrorIs(t, c.Admin().Forget(ctx, "inventory", id), inbox.ErrNotFound)
			_, err := c.Admin().ForgetCount(ctx, "inventory", id)
			requireErrorIs(t, err, inbox.ErrNotFound)
		}},

		{"InvalidInputBeforeSQL", func(t *testing.T, x *suite[TTx]) {
			counting := &countingDriver[TTx]{Driver: x.s.Driver}
			c, err := inbox.NewClient[TTx](counting, nil)
			if err != nil {
				t.Fatal(err)
			}
			h, cs := x.effect("billing")
			ctx := context.Background()
			id := NewID()
			for _, consumer := range []string{"", " billing", "billing\n", strings.Repeat("b", 129), "bill\x00ing", "bill\xffing"} {
				_, err := c.Process(ctx, consumer, msg(id), h)
				requireErrorIs(t, err, inbox.ErrInvalidConsumer)
				_, err = c.ProcessBatch(ctx, consumer, []inbox.Message{msg(id)}, h)
				requireErrorIs(t, err, inbox.ErrInvalidConsumer)
				requireErrorIs(t, c.Admin().Forget(ctx, consumer, id), inbox.ErrInvalidConsumer)
				_, err = c.Admin().ForgetCount(ctx, consumer, id)
				requireErrorIs(t, err, inbox.ErrInvalidConsumer)
			}
			for _, bad := range []struct {
				id   string
				want error
			}{{"", inbox.ErrNoMessageID}, {"42", inbox.ErrMalformedID}, {id + " ", inbox.ErrMalformedID},
				{"{" + id, inbox.ErrMalformedID}, {"00000000-0000-0000-0000-000000000000", inbox.ErrMalformedID},
				{strings.Replace(id, "-", "g", 1), inbox.ErrMalformedID}} {
				_, err := c.Process(ctx, "billing", msg(bad.id), h)
				requireErrorIs(t, err, bad.want)
				if inbox.IsRetryable(err) {
					t.Fatalf("a bad id must not be retryable: %v", err)
				}
			}
			requireEqual(t, "store calls", counting.calls.Load(), int64(0))
			requireEqual(t, "handler calls", len(cs.list()), 0)
		}},

		{"DeadLetters", func(t *testing.T, x *suite[TTx]) {
			c := x.client(nil)
			ctx := context.Background()
			id := NewID()
			m := inbox.Message{ID: strings.ToUpper(id), Payload: []byte(`{"amount_cents":100}`),
				Headers: map[string]string{"event-id": id},
				Source:  inbox.Source{Transport: "kafka", Queue: "orders", Partition: 3, Offset: 1207, Key: []byte("acct-1")}}
			for attempt := 1; attempt <= 2; attempt++ {
				if err := c.DeadLetter(ctx, inbox.DeadLetterParams{Consumer: "billing", Message: m, Err: errBoom, Attempts: attempt}); err != nil {
					t.Fatal(err)
				}
			}
			// Bytes that text columns refuse: the message must still be
			// dead-lettered, with the payload intact.
			noID := inbox.Message{Payload: []byte("\x00\xff{}"), Headers: map[string]string{"trace\x00": "bin\xff\x00ary"},
				Source: inbox.Source{Transport: "sqs", Queue: "q\x00", BrokerID: "m-1\xfe"}}
			if err := c.DeadLetter(ctx, inbox.DeadLetterParams{Consumer: "billing", Message: noID, Err: inbox.ErrNoMessageID, Attempts: 1}); err != nil {
				t.Fatal(err)
			}
			list, err := c.Admin().DeadLetterList(ctx, inboxtype.DeadLetterListParams{Consumer: "billing", Limit: 10})
			if err != nil {
				t.Fatal(err)
			}
			requireEqual(t, "dead letters", len(list), 2)
			var withID *inboxtype.DeadLetter
			for _, d := range list {
				if d.MessageID != "" {
					withID = d
				} else {
					requireEqual(t, "reason", d.Reason, inbox.ReasonNoID)
					requireEqual(t, "payload bytes", string(d.Payload), "\x00\xff{}")
					requireEqual(t, "sanitised header", d.Headers["trace\uFFFD"], "bin\uFFFD\uFFFDary")
					requireEqual(t, "sanitised broker id", d.BrokerID, "m-1\uFFFD")
				}
			}
			if withID == nil {
				t.Fatal("the dead letter with an id is missing")
			}
			got, err := c.Admin().DeadLetterGet(ctx, withID.ID)
			if err != nil {
				t.Fatal(err)
			}
			requireEqual(t, "message id", got.MessageID, id)
			requireEqual(t, "attempts", got.Attempts, 2)
			requireEqual(t, "reason", got.Reason, inbox.ReasonMaxAttempts)
			requireEqual(t, "queue", got.Queue, "orders")
			requireEqual(t, "partition", got.Partition, int32(3))
			requireEqual(t, "offset", got.Offset, int64(1207))
			requireEqual(t, "key", string(got.Key), "acct-1")
			requireEqual(t, "header", got.Headers["event-id"], id)
			requireEqual(t, "payload", string(got.Payload), `{"amount_cents":100}`)
			if got.LastSeen.Before(got.FirstSeen) || got.FirstSeen.IsZero() {
				t.Fatalf("first seen %v, last seen %v", got.FirstSeen, got.LastSeen)
			}
			_, err = c.Admin().DeadLetterList(ctx, inboxtype.DeadLetterListParams{Consumer: "inventory", Limit: 10})
			if err != nil {
				t.Fatal(err)
			}

			h, cs := x.effect("billing")
			RequireApplied(t)(c.ProcessDeadLetter(ctx, withID.ID, h))
			requireEqual(t, "replay handler calls", len(cs.list()), 1)
			_, err = c.Admin().DeadLetterGet(ctx, withID.ID)
			requireErrorIs(t, err, inbox.ErrNotFound)
			RequireDuplicate(t)(c.Process(ctx, "billing", msg(id), h))
			requireErrorIs(t, c.Admin().DeadLetterDelete(ctx, withID.ID), inbox.ErrNotFound)
		}},

		{"ReplayMarkedDeadLetters", func(t *testing.T, x *suite[TTx]) {
			c := x.client(nil)
			ctx := context.Background()
			deadLetter := func(consumer string, m inbox.Message) int64 {
				t.Helper()
				if err := c.DeadLetter(ctx, inbox.DeadLetterParams{Consumer: consumer, Message: m, Err: errBoom, Attempts: 3}); err != nil {
					t.Fatal(err)
				}
				list, err := c.Admin().DeadLetterList(ctx, inboxtype.DeadLetterListParams{Consumer: consumer, Limit: 100})
				if err != nil {
					t.Fatal(err)
				}
				for _, d := range list {
					if d.MessageID == m.ID || m.ID == "" && d.MessageID == "" {
						return d.ID
					}
				}
				t.Fatalf("dead letter %q of %s not found", m.ID, consumer)
				return 0
			}
			id1, id2, id3 := NewID(), NewID(), NewID()
			d1, d2 := deadLetter("billing", msg(id1)), deadLetter("billing", msg(id2))
			dNoID := deadLetter("billing", inbox.Message{Payload: []byte("?"), Source: inbox.Source{Transport: "sqs", Queue: "q", BrokerID: "m-1"}})
			dOther := deadLetter("inventory", msg(id3))

			marked, err := c.Admin().DeadLetterReplay(ctx, inbox.DeadLetterReplayParams{ID: d1})
			requireEqual(t, "first mark", marked, int64(1))
			requireEqual(t, "first mark error", err, nil)
			marked, err = c.Admin().DeadLetterReplay(ctx, inbox.DeadLetterReplayParams{ID: d1})
			requireEqual(t, "second mark of the same", marked, int64(0))
			requireEqual(t, "second mark error", err, nil)
			_, err = c.Admin().DeadLetterReplay(ctx, inbox.DeadLetterReplayParams{ID: dNoID})
			requireErrorIs(t, err, inbox.ErrNoMessageID)
			_, err = c.Admin().DeadLetterReplay(ctx, inbox.DeadLetterReplayParams{ID: 1 << 40})
			requireErrorIs(t, err, inbox.ErrNotFound)

			// Two concurrent marks of one dead letter: one marks it.
			var wins atomic.Int32
			var wg sync.WaitGroup
			for range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ok, err := c.Admin().DeadLetterReplay(ctx, inbox.DeadLetterReplayParams{ID: d2})
					if err != nil {
						t.Error(err)
					}
					if ok > 0 {
						wins.Add(1)
					}
				}()
			}
			wg.Wait()
			requireEqual(t, "concurrent marks that marked", wins.Load(), 1)

			// A consumer's replay replays its own dead letters, not billing's.
			marked, err = c.Admin().DeadLetterReplay(ctx, inbox.DeadLetterReplayParams{ID: dOther})
			requireEqual(t, "mark inventory's", marked, int64(1))
			requireEqual(t, "mark inventory's error", err, nil)
			hOther, csOther := x.effect("inventory")
			rs, err := c.ProcessReplays(ctx, "inventory", hOther)
			requireEqual(t, "inventory replay error", err, nil)
			requireEqual(t, "inventory replays", len(rs), 1)
			requireEqual(t, "inventory outcome", rs[0].Outcome, inbox.Applied)
			requireEqual(t, "inventory handler calls", len(csOther.list()), 1)
			x.requireEffects("inventory", id3, 1)

			// id2 was applied meanwhile (a redelivery the producer sent
			// again): its replay is a Duplicate, and the handler does not run
			// for it.
			h, cs := x.effect("billing")
			RequireApplied(t)(c.Process(ctx, "billing", msg(id2), h))
			rs, err = c.ProcessReplays(ctx, "billing", h)
			requireEqual(t, "replay error", err, nil)
			requireEqual(t, "replays", len(rs), 2)
			got := map[string]inbox.Outcome{}
			for _, r := range rs {
				requireEqual(t, "replay result error", r.Err, nil)
				got[r.DeadLetter.MessageID] = r.Outcome
			}
			requireEqual(t, "outcome of "+id1, got[id1], inbox.Applied)
			requireEqual(t, "outcome of "+id2, got[id2], inbox.Duplicate)
			x.requireEffects("billing", id1, 1)
			x.requireEffects("billing", id2, 1)
			requireEqual(t, "handler calls", len(cs.list()), 2)
			for _, d := range []int64{d1, d2} {
				_, err := c.Admin().DeadLetterGet(ctx, d)
				requireErrorIs(t, err, inbox.ErrNotFound)
			}
			rs, err = c.ProcessReplays(ctx, "billing", h)
			requireEqual(t, "replay error", err, nil)
			requireEqual(t, "replays once they are done", len(rs), 0)

			// A replay whose handler fails again: the dead letter stays, with
			// the error and one more attempt, and is no longer marked.
			id4 := NewID()
			d4 := deadLetter("billing", msg(id4))
			n, err := c.Admin().DeadLetterReplay(ctx, inbox.DeadLetterReplayParams{Consumer: "billing"})
			requireEqual(t, "mark all error", err, nil)
			requireEqual(t, "marked of billing's (not the one without an id)", n, int64(1))
			errAgain := errors.New("still declined")
			failing := inbox.HandlerFunc[TTx](func(context.Context, TTx, inbox.Message) error { return errAgain })
			rs, err = c.ProcessReplays(ctx, "billing", failing)
			requireEqual(t, "replay error", err, nil)
			requireEqual(t, "replays", len(rs), 1)
			requireErrorIs(t, rs[0].Err, errAgain)
			d, err := c.Admin().DeadLetterGet(ctx, d4)
			if err != nil {
				t.Fatal(err)
			}
			requireEqual(t, "attempts after the failed replay", d.Attempts, 4)
			if !strings.Contains(d.Error, "still declined") {
				t.Fatalf("the dead letter's error is %q, want the replay's", d.Error)
			}
			rs, err = c.ProcessReplays(ctx, "billing", failing)
			requireEqual(t, "replay error", err, nil)
			requireEqual(t, "replays of an unmarked dead letter", len(rs), 0)
			marked, err = c.Admin().DeadLetterReplay(ctx, inbox.DeadLetterReplayParams{ID: d4})
			requireEqual(t, "mark again", marked, int64(1))
			requireEqual(t, "mark again error", err, nil)
			rs, err = c.ProcessReplays(ctx, "billing", h)
			requireEqual(t, "replay error", err, nil)
			requireEqual(t, "replays", len(rs), 1)
			requireEqual(t, "outcome", rs[0].Outcome, inbox.Applied)
			x.requireEffects("billing", id4, 1)
			_, err = c.ProcessReplays(ctx, "bill\x00ing", h)
			requireErrorIs(t, err, inbox.ErrInvalidConsumer)
		}},

		{"ReplayDryRunMarksNothing", func(t *testing.T, x *suite[TTx]) {
			c := x.client(nil)
			ctx := context.Background()
			for _, m := range []inbox.Message{msg(NewID()), msg(NewID()), {Payload: []byte("?"), Source: inbox.Source{Transport: "sqs", Queue: "q", BrokerID: "m-1"}}} {
				if err := c.DeadLetter(ctx, inbox.DeadLetterParams{Consumer: "billing", Message: m, Err: errBoom, Attempts: 3}); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.DeadLetter(ctx, inbox.DeadLetterParams{Consumer: "inventory", Message: msg(NewID()), Err: errBoom, Attempts: 1}); err != nil {
				t.Fatal(err)
			}
			list, err := c.Admin().DeadLetterList(ctx, inboxtype.DeadLetterListParams{Consumer: "billing", Limit: 10})
			if err != nil {
				t.Fatal(err)
			}
			var one int64
			for _, d := range list {
				if d.MessageID != "" {
					one = d.ID
				}
			}
			// Counted as the mark would count: billing's with an id, not
			// the one without, nor inventory's; and nothing is marked.
			for range 2 {
				n, err := c.Admin().DeadLetterReplay(ctx, inbox.DeadLetterReplayParams{Consumer: "billing", DryRun: true})
				requireEqual(t, "dry run error", err, nil)
				requireEqual(t, "would mark", n, int64(2))
			}
			n, err := c.Admin().DeadLetterReplay(ctx, inbox.DeadLetterReplayParams{ID: one, DryRun: true})
			requireEqual(t, "dry run of one error", err, nil)
			requireEqual(t, "would mark one", n, int64(1))
			n, err = c.Admin().DeadLetterReplay(ctx, inbox.DeadLetterReplayParams{ID: one})
			requireEqual(t, "mark one error", err, nil)
			requireEqual(t, "marked one after its dry run", n, int64(1))
			n, err = c.Admin().DeadLetterReplay(ctx, inbox.DeadLetterReplayParams{Consumer: "billing", DryRun: true})
			requireEqual(t, "dry run error", err, nil)
			requireEqual(t, "would mark, with one marked", n, int64(1))
			n, err = c.Admin().DeadLetterReplay(ctx, inbox.DeadLetterReplayParams{Consumer: "billing"})
			requireEqual(t, "mark all error", err, nil)
			requireEqual(t, "marked all after the dry runs", n, int64(1))
			_, err = c.Admin().DeadLetterReplay(ctx, inbox.DeadLetterReplayParams{ID: 1 << 40, DryRun: true})
			requireErrorIs(t, err, inbox.ErrNotFound)
		}},

		{"ConcurrentReplays", func(t *testing.T, x *suite[TTx]) {
			// Two replays of one marked dead letter race: the message is
			// applied once.
			c := x.client(&inbox.Config{LockTimeout: -1, MaxConflictRetries: 50})
			ctx := context.Background()
			id := NewID()
			if err := c.DeadLetter(ctx, inbox.DeadLetterParams{Consumer: "billing", Message: msg(id), Err: errBoom, Attempts: 3}); err != nil {
				t.Fatal(err)
			}
			n, err := c.Admin().DeadLetterReplay(ctx, inbox.DeadLetterReplayParams{Consumer: "billing"})
			requireEqual(t, "mark error", err, nil)
			requireEqual(t, "marked", n, int64(1))
			effect, cs := x.effect("billing")
			claimed := make(chan struct{})
			release := make(chan struct{})
			var first sync.Once
			h := inbox.HandlerFunc[TTx](func(ctx context.Context, tx TTx, m inbox.Message) error {
				first.Do(func() {
					close(claimed)
					<-release
				})
				return effect.Handle(ctx, tx, m)
			})
			type replay struct {
				rs  []inbox.ReplayResult
				err error
			}
			done := make(chan replay, 2)
			go func() {
				rs, err := c.ProcessReplays(ctx, "billing", h)
				done <- replay{rs, err}
			}()
			<-claimed // the first replay holds the claim, uncommitted
			go func() {
				rs, err := c.ProcessReplays(ctx, "billing", h)
				done <- replay{rs, err}
			}()
			x.awaitWaitingClaim(t)
			close(release)
			var applied, duplicate int
			for range 2 {
				r := <-done
				if r.err != nil {
					t.Fatalf("replay: %v", r.err)
				}
				for _, res := range r.rs {
					switch {
					case res.Err != nil:
						t.Fatalf("replay result: %v", res.Err)
					case res.Outcome == inbox.Applied:
						applied++
					case res.Outcome == inbox.Duplicate:
						duplicate++
					}
				}
			}
			requireEqual(t, "replays that applied", applied, 1)
			if x.s.WaitingClaims != nil {
				// The second replay waited behind the first's claim.
				requireEqual(t, "replays that found a duplicate", duplicate, 1)
			}
			requireEqual(t, "handler calls", len(cs.list()), 1)
			x.requireEffects("billing", id, 1)
			list, err := c.Admin().DeadLetterList(ctx, inboxtype.DeadLetterListParams{Consumer: "billing", Limit: 10})
			requireEqual(t, "list error", err, nil)
			requireEqual(t, "dead letters left", len(list), 0)
		}},
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
