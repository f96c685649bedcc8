package inboxkafka_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxtransport"
	"github.com/txinbox/inbox/internal/require"
)

// A custom KeyFunc's plain error is the record's: it is dead-lettered at
// once as malformed_id, as inboxsqs does, not as max_attempts with no
// attempt.
func TestKeyFuncErrorIsMalformedID(t *testing.T) {
	e := newEnv(t, protocols[0], envOpts{partitions: 1})
	evs := events(3, 1)
	evs = append(evs, event{id: "", key: "k0", n: 4, partition: -1, value: "unreadable"})
	var tl tally
	cfg := consumerConfig()
	cfg.Key = func(msg inbox.Message) (string, error) {
		if string(msg.Payload) == "unreadable" {
			return "", errors.New("the id field is encrypted with a key we lost")
		}
		return inbox.HeaderKey("event-id")(msg)
	}
	cfg.OnResult = tl.observe
	r := e.start("a", cfg, e.handler())
	e.produce(evs)
	e.waitCommittedToEnd(time.Minute)
	r.stop(t)

	e.requireExactlyOnce(ids(evs))
	ds := e.deadLetters()
	require.Len(t, ds, 1)
	require.Equal(t, inbox.ReasonMalformedID, ds[0].Reason)
	require.Equal(t, 0, ds[0].Attempts)
	require.Contains(t, ds[0].Error, "encrypted with a key we lost")
}

// breakerObserver records the pauses a client's breakers report.
type breakerObserver struct {
	mu              sync.Mutex
	paused, resumed []inboxtransport.PauseEvent
}

func (o *breakerObserver) TxStart(ctx context.Context, _ string, _ []inbox.Message) context.Context {
	return ctx
}
func (o *breakerObserver) TxEnd(context.Context, *inbox.TxEvent)                {}
func (o *breakerObserver) DeadLettered(context.Context, *inbox.DeadLetterEvent) {}
func (o *breakerObserver) Paused(_ context.Context, e *inboxtransport.PauseEvent) {
	o.mu.Lock()
	o.paused = append(o.paused, *e)
	o.mu.Unlock()
}
func (o *breakerObserver) Resumed(_ context.Context, e *inboxtransport.PauseEvent) {
	o.mu.Lock()
	o.resumed = append(o.resumed, *e)
	o.mu.Unlock()
}

func (o *breakerObserver) streakPauses() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, e := range o.paused {
		if e.Cause == inboxtransport.PauseStreak {
			n++
		}
	}
	return n
}

// TestStreakBreakerDeadLettersNoHealthyRecord: a handler whose dependency
// is down fails every record with a plain error, which looks like each
// record's own. Distinct records failing alike open the streak breaker:
// the consumer pauses and probes instead of using up the records'
// attempts, and once the dependency is back every record is applied and
// none was dead-lettered.
func TestStreakBreakerDeadLettersNoHealthyRecord(t *testing.T) {
	e := newEnv(t, protocols[0], envOpts{partitions: 3})
	obs := &breakerObserver{}
	var err error
	e.client, err = inbox.NewClient(e.client.Driver(), &inbox.Config{StreakLimit: 3, StreakPause: 50 * time.Millisecond, Observer: obs})
	require.NoError(t, err)
	evs := events(60, 3)
	var down atomic.Bool
	down.Store(true)
	var failures atomic.Int64
	h := inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
		if down.Load() {
			failures.Add(1)
			return errors.New("ledger service: 503 Service Unavailable")
		}
		return effect(ctx, e.effects, tx, msg)
	})
	var tl tally
	cfg := consumerConfig()
	cfg.MaxAttempts = 4
	cfg.MinBackoff = 50 * time.Millisecond
	cfg.MaxBackoff = 200 * time.Millisecond
	cfg.OnResult = tl.observe
	r := e.start("a", cfg, h)
	e.produce(evs)
	waitFor(t, time.Minute, "the streak breaker to open and a probe to fail", func() (bool, error) {
		return obs.streakPauses() >= 2, nil
	})
	t.Logf("%d failures while the dependency was down", failures.Load())
	down.Store(false)
	e.waitCommittedToEnd(time.Minute)
	r.stop(t)

	e.requireExactlyOnce(ids(evs))
	require.Empty(t, e.deadLetters())
	require.Zero(t, tl.deadLettered.Load())
	obs.mu.Lock()
	defer obs.mu.Unlock()
	require.Equal(t, 3, obs.paused[0].Streak)
	require.NotEmpty(t, obs.resumed)
}
