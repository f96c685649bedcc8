package inboxnats_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxtest"
	"github.com/txinbox/inbox/inboxtransport"
	"github.com/txinbox/inbox/internal/require"
)

// tries counts the handler's calls per message id.
type tries struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *tries) next(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[id]++
	return c.n[id]
}

func (c *tries) count(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[id]
}

// A failure that is not the message's is no attempt, though JetStream
// counts its delivery in NumDelivered: a message whose handler reports a
// dependency unavailable three times, with MaxDeliver 2, is then allowed
// two failures of its own. One that then fails once is applied; one that
// fails for good is dead-lettered after exactly two attempts.
func TestNotTheMessagesFaultIsNoAttempt(t *testing.T) {
	t.Parallel()
	h := newHarness(t, machineServer(t))
	durable := h.durable(nil)
	flaky, poison := inboxtest.NewID(), inboxtest.NewID()
	h.publish(flaky, event{N: 1})
	h.publish(poison, event{N: 2, Poison: "retryable"})
	var calls tries
	handler := inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
		n := calls.next(msg.ID)
		switch {
		case n <= 3:
			return inbox.Unavailable(errors.New("ledger service: connection refused"))
		case msg.ID == flaky && n == 4:
			return errors.New("ledger service: 409 try again")
		case msg.ID == poison:
			return errors.New("the amount is not a number")
		}
		_, err := h.applyEffect(ctx, tx, msg)
		return err
	})
	cfg := h.config(durable)
	cfg.MaxDeliver = 2
	// One delivery per transaction, so that the handler's calls count
	// deliveries: in a batch, a batch-mate's unavailable dependency fails
	// the whole transaction, and a handler that already ran in it is
	// excused with it, so it would be called once more than counted.
	cfg.Batch = 1
	cfg.RetryBackoff = 20 * time.Millisecond
	cfg.MaxRetryBackoff = 200 * time.Millisecond
	h.start(cfg, handler, nil)
	h.waitSettled(durable)
	require.Equal(t, 1, h.effectCount(flaky))
	dls, err := h.client.ListDeadLetters(context.Background(), inbox.ListDeadLettersParams{Consumer: "billing", Limit: 10})
	require.NoError(t, err)
	require.Len(t, dls, 1)
	require.Equal(t, poison, dls[0].MessageID)
	require.Equal(t, inbox.ReasonMaxAttempts, dls[0].Reason)
	require.Equal(t, 2, dls[0].Attempts, "the deliveries it was unavailable are not attempts")
	require.Equal(t, 5, calls.count(poison), "three deliveries excused, two attempts")
}

// pauseCounter is an Observer that counts the breaker's streak pauses.
type pauseCounter struct {
	mu     sync.Mutex
	streak int
	first  inboxtransport.PauseEvent
}

func (o *pauseCounter) TxStart(ctx context.Context, _ string, _ []inbox.Message) context.Context {
	return ctx
}
func (o *pauseCounter) TxEnd(context.Context, *inbox.TxEvent)                {}
func (o *pauseCounter) DeadLettered(context.Context, *inbox.DeadLetterEvent) {}
func (o *pauseCounter) Resumed(context.Context, *inboxtransport.PauseEvent)  {}
func (o *pauseCounter) Paused(_ context.Context, e *inboxtransport.PauseEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if e.Cause == inboxtransport.PauseStreak {
		if o.streak == 0 {
			o.first = *e
		}
		o.streak++
	}
}

func (o *pauseCounter) pauses() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.streak
}

// The streak breaker, shared with the other adapters: while a dependency
// of the handler is down, every message fails with a plain error, and with
// MaxDeliver 1 each would be dead-lettered. The breaker stops that after
// StreakLimit distinct messages, pauses and probes, and the rest are
// applied once the dependency is back.
func TestStreakBreakerBoundsDeadLetters(t *testing.T) {
	t.Parallel()
	h := newHarness(t, machineServer(t))
	obs := &pauseCounter{}
	var err error
	h.client, err = inbox.NewClient(h.client.Driver(), &inbox.Config{StreakLimit: 3, StreakPause: 50 * time.Millisecond, Observer: obs})
	require.NoError(t, err)
	durable := h.durable(nil)
	ids := make([]string, 20)
	for i := range ids {
		ids[i] = inboxtest.NewID()
		h.publish(ids[i], event{N: i})
	}
	var down atomic.Bool
	down.Store(true)
	handler := inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
		if down.Load() {
			return errors.New("ledger service: 503 Service Unavailable")
		}
		_, err := h.applyEffect(ctx, tx, msg)
		return err
	})
	cfg := h.config(durable)
	cfg.MaxDeliver = 1
	cfg.Batch = 1
	cfg.RetryBackoff = 20 * time.Millisecond
	cfg.MaxRetryBackoff = 200 * time.Millisecond
	h.start(cfg, handler, nil)
	eventually(t, "the streak breaker to open and a probe to fail", func() bool { return obs.pauses() >= 2 })
	down.Store(false)
	h.waitSettled(durable)
	dls, err := h.client.ListDeadLetters(context.Background(), inbox.ListDeadLettersParams{Consumer: "billing", Limit: 100})
	require.NoError(t, err)
	require.LessOrEqual(t, len(dls), 2, "at most StreakLimit-1 messages dead-lettered before the breaker opened")
	dead := map[string]bool{}
	for _, d := range dls {
		dead[d.MessageID] = true
	}
	for _, id := range ids {
		if !dead[id] {
			require.Equal(t, 1, h.effectCount(id), "message %s", id)
		}
	}
	require.Equal(t, 3, obs.first.Streak)
}
