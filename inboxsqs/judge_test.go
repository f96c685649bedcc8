package inboxsqs_test

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

// A custom KeyFunc's plain error is the message's: dead-lettered at once as
// malformed_id with no attempt, as on every transport.
func TestKeyFuncErrorIsMalformedID(t *testing.T) {
	h := newHarness(t)
	q := h.createQueue("keyfunc", false)
	good := inboxtest.NewID()
	h.send(q, event{EventID: good}.body(), "")
	bad := h.send(q, `{"sealed":"x"}`, "")
	cfg := h.config(q)
	cfg.Key = func(msg inbox.Message) (string, error) {
		if string(msg.Payload) == `{"sealed":"x"}` {
			return "", errors.New("the id field is encrypted with a key we lost")
		}
		return inbox.JSONKey("event_id")(msg)
	}
	var calls atomic.Int32
	h.start(cfg, h.effectHandler(&calls), nil)
	h.waitDeleted(bad)
	h.waitDrained(q)
	require.Equal(t, 1, h.effectCount(good))
	ds, err := h.client.ListDeadLetters(context.Background(), inbox.ListDeadLettersParams{Consumer: "billing", Limit: 10})
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.Equal(t, inbox.ReasonMalformedID, ds[0].Reason)
	require.Equal(t, 0, ds[0].Attempts, "its handler never ran")
	require.Contains(t, ds[0].Error, "encrypted with a key we lost")
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

// TestStreakBreakerBoundsDeadLetters: while a dependency of the handler is
// down, every message fails with a plain error. With MaxReceives 1 each
// such failure would dead-letter its message; the streak breaker stops
// that after StreakLimit distinct messages, pauses and probes, and the
// rest are applied once the dependency is back.
func TestStreakBreakerBoundsDeadLetters(t *testing.T) {
	h := newHarness(t)
	obs := &pauseCounter{}
	var err error
	h.client, err = inbox.NewClient(h.client.Driver(), &inbox.Config{StreakLimit: 3, StreakPause: 50 * time.Millisecond, Observer: obs})
	require.NoError(t, err)
	q := h.createQueue("streak", false)
	ids := make([]string, 20)
	for i := range ids {
		ids[i] = inboxtest.NewID()
		h.send(q, event{EventID: ids[i], N: i}.body(), "")
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
	cfg := h.config(q)
	cfg.MaxReceives = 1
	h.start(cfg, handler, nil)
	eventually(t, "the streak breaker to open and a probe to fail", func() bool { return obs.pauses() >= 2 })
	down.Store(false)
	h.waitDrained(q)
	ds, err := h.client.ListDeadLetters(context.Background(), inbox.ListDeadLettersParams{Consumer: "billing", Limit: 100})
	require.NoError(t, err)
	require.LessOrEqual(t, len(ds), 2, "at most StreakLimit-1 messages dead-lettered before the breaker opened")
	dead := map[string]bool{}
	for _, d := range ds {
		dead[d.MessageID] = true
	}
	for _, id := range ids {
		if !dead[id] {
			eventually(t, "message "+id+" applied", func() bool { return h.effectCount(id) == 1 })
		}
	}
	require.Equal(t, 3, obs.first.Streak)
}
