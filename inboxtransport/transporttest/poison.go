package transporttest

import (
	"context"
	"errors"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxtransport"
	"github.com/txinbox/inbox/outbox"
)

func poisonCases[TTx any]() []testCase[TTx] {
	return []testCase[TTx]{
		{"poison-dead-lettered", testPoisonDeadLettered[TTx]},
		{"key-func-error-is-malformed-id", testKeyFuncErrorIsMalformedID[TTx]},
		{"not-the-messages-fault-is-no-attempt", testNotTheMessagesFault[TTx]},
		{"streak-breaker-bounds-dead-letters", testStreakBreaker[TTx]},
		{"store-outage", testOutage[TTx]},
	}
}

// Poison messages are dead-lettered with their reason, never dropped: one
// whose handler fails permanently at once, one that always fails after
// MaxDeliveries attempts, one without an id and one with a malformed id
// without running their handler. The healthy ones around them are applied
// once, and every message is acknowledged.
func testPoisonDeadLettered[TTx any](t *testing.T, tr Transport[TTx]) {
	e := newEnv(t, tr, QueueOptions{}, nil)
	good, permanent, failing, good2 := newID(), newID(), newID(), newID()
	e.publish(
		msg(good, event{N: 1}),
		msg(permanent, event{N: 2, Fail: "permanent"}),
		msg(failing, event{N: 3, Fail: "retryable"}),
		msg("", event{N: 4}),
		msg("not-a-uuid", event{N: 5}),
		msg(good2, event{N: 6}),
	)
	s := e.settings()
	r := e.start(e.handler(), s, ConsumerOptions[TTx]{}, nil)
	e.waitApplied(good, good2)
	eventually(t, "four dead letters", func() (bool, error) {
		n := 0
		for _, ds := range e.deadLetters() {
			n += len(ds)
		}
		return n >= 4, nil
	})
	e.waitDrained()
	require.NoError(t, r.Stop())
	e.requireExactlyOnce(good, good2)
	e.requireDrained()

	dls := e.deadLetters()
	var reasons []string
	for _, ds := range dls {
		for _, d := range ds {
			reasons = append(reasons, d.Reason)
		}
	}
	sort.Strings(reasons)
	want := []string{inbox.ReasonMalformedID, inbox.ReasonMaxAttempts, inbox.ReasonNoID, inbox.ReasonPermanent}
	sort.Strings(want)
	require.Equal(t, want, reasons, "each poison message dead-lettered once, with its reason")
	require.Equal(t, inbox.ReasonMaxAttempts, dls[failing][0].Reason)
	require.Equal(t, s.MaxDeliveries, dls[failing][0].Attempts, "dead-lettered after MaxDeliveries attempts")
	require.Equal(t, 1, dls[permanent][0].Attempts, "a permanent failure is not retried")
}

// A custom KeyFunc's plain error is the message's: it is dead-lettered at
// once as malformed_id, with no attempt (its handler never ran).
func testKeyFuncErrorIsMalformedID[TTx any](t *testing.T, tr Transport[TTx]) {
	e := newEnv(t, tr, QueueOptions{}, nil)
	good := newID()
	e.publish(msg(good, event{N: 1}), msg("", event{N: 2}))
	key := func(m inbox.Message) (string, error) {
		if m.Headers[outbox.HeaderEventID] == "" {
			return "", errors.New("the id field is encrypted with a key we lost")
		}
		return inbox.HeaderKey(outbox.HeaderEventID)(m)
	}
	r := e.start(e.handler(), e.settings(), ConsumerOptions[TTx]{Key: key}, nil)
	e.waitApplied(good)
	e.waitDrained()
	require.NoError(t, r.Stop())
	e.requireExactlyOnce(good)
	e.requireDrained()
	ds := e.deadLetters()[""]
	require.Len(t, ds, 1)
	require.Equal(t, inbox.ReasonMalformedID, ds[0].Reason)
	require.Equal(t, 0, ds[0].Attempts)
	require.Contains(t, ds[0].Error, "encrypted with a key we lost")
}

// A failure that is not the message's (a dependency the handler reports
// unavailable) is no attempt, though a broker may count its delivery: a
// message that fails so three times, then fails for good, is dead-lettered
// after exactly MaxDeliveries attempts of its own; one that then succeeds
// is applied.
func testNotTheMessagesFault[TTx any](t *testing.T, tr Transport[TTx]) {
	e := newEnv(t, tr, QueueOptions{}, nil)
	flaky, poison := newID(), newID()
	e.publish(msg(flaky, event{N: 1, Fail: "unavailable"}), msg(poison, event{N: 2, Fail: "unavailable-then-retryable"}))
	h := e.handler()
	s := e.settings()
	// One message per transaction, so that the handler's calls count
	// deliveries: in a batch, a batch-mate's unavailable dependency fails
	// the whole transaction, and excuses a handler that already ran in it.
	s.MaxBatch = 1
	r := e.start(h, s, ConsumerOptions[TTx]{}, nil)
	e.waitApplied(flaky)
	eventually(t, "the poison message dead-lettered", func() (bool, error) { return len(e.deadLetters()[poison]) > 0, nil })
	e.waitDrained()
	require.NoError(t, r.Stop())
	e.requireExactlyOnce(flaky)
	d := e.deadLetters()[poison][0]
	require.Equal(t, inbox.ReasonMaxAttempts, d.Reason)
	require.Equal(t, s.MaxDeliveries, d.Attempts, "the deliveries it was unavailable are not attempts")
	require.Equal(t, 3+s.MaxDeliveries, h.tried(poison), "three deliveries excused, then its attempts")
}

// streakObserver counts the streak breaker's pauses.
type streakObserver struct {
	mu     sync.Mutex
	pauses int
	first  inboxtransport.PauseEvent
}

func (o *streakObserver) TxStart(ctx context.Context, _ string, _ []inbox.Message) context.Context {
	return ctx
}
func (o *streakObserver) TxEnd(context.Context, *inbox.TxEvent)                {}
func (o *streakObserver) DeadLettered(context.Context, *inbox.DeadLetterEvent) {}
func (o *streakObserver) Resumed(context.Context, *inboxtransport.PauseEvent)  {}
func (o *streakObserver) Paused(_ context.Context, e *inboxtransport.PauseEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if e.Cause == inboxtransport.PauseStreak {
		if o.pauses == 0 {
			o.first = *e
		}
		o.pauses++
	}
}

func (o *streakObserver) get() (int, inboxtransport.PauseEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.pauses, o.first
}

// While a dependency of the handler is down, every message fails with a
// plain error, and with MaxDeliveries 1 each would be dead-lettered. The
// streak breaker stops that after StreakLimit distinct messages, pauses
// and probes, and the rest are applied once the dependency is back.
func testStreakBreaker[TTx any](t *testing.T, tr Transport[TTx]) {
	obs := &streakObserver{}
	e := newEnv(t, tr, QueueOptions{}, &inbox.Config{Observer: obs})
	ids := make([]string, 20)
	var msgs []Message
	for i := range ids {
		ids[i] = newID()
		msgs = append(msgs, msg(ids[i], event{N: i}))
	}
	e.publish(msgs...)
	var down atomic.Bool
	down.Store(true)
	inner := e.handler()
	h := inbox.HandlerFunc[TTx](func(ctx context.Context, tx TTx, m inbox.Message) error {
		if down.Load() {
			return errors.New("ledger service: 503 Service Unavailable")
		}
		return inner.Handle(ctx, tx, m)
	})
	s := e.settings()
	// Two workers (the default here): a message whose handler failed
	// while the dependency was down may be judged after the other
	// worker's success closed the breaker; it is still no attempt (a CI
	// run once dead-lettered a third message so).
	s.MaxDeliveries, s.MaxBatch = 1, 1
	s.StreakLimit, s.StreakPause = 3, 50*time.Millisecond
	r := e.start(h, s, ConsumerOptions[TTx]{}, nil)
	eventually(t, "the streak breaker to open and a probe to fail", func() (bool, error) {
		n, _ := obs.get()
		return n >= 2, nil
	})
	down.Store(false)
	dead := map[string]bool{}
	eventually(t, "every message applied or dead-lettered", func() (bool, error) {
		c := e.counts()
		dls := e.deadLetters()
		for _, id := range ids {
			if c[id] == 0 && len(dls[id]) == 0 {
				return false, nil
			}
			dead[id] = len(dls[id]) > 0
		}
		return true, nil
	})
	e.waitDrained()
	require.NoError(t, r.Stop())
	e.requireDrained()
	var healthy []string
	n := 0
	for _, id := range ids {
		if dead[id] {
			n++
		} else {
			healthy = append(healthy, id)
		}
	}
	require.LessOrEqual(t, n, 2, "at most StreakLimit-1 messages dead-lettered before the breaker opened")
	e.requireExactlyOnce(healthy...)
	_, first := obs.get()
	require.Equal(t, 3, first.Streak)
}
