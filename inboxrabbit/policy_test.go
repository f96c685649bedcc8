package inboxrabbit_test

import (
	"context"
	"errors"
	"github.com/txinbox/inbox/inboxtype"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxtest"
	"github.com/txinbox/inbox/internal/fault"
	"github.com/txinbox/inbox/internal/require"
	"github.com/txinbox/inbox/internal/txcount"
)

func (h *harness) observe(t *testing.T) *txcount.Observer {
	obs := &txcount.Observer{}
	var err error
	h.client, err = inbox.NewClient(h.client.Driver(), &inbox.Config{Observer: obs})
	require.NoError(t, err)
	return obs
}

// TestDuplicateReasons: a delivery the broker requeued after its
// transaction committed (a lost ack) reaches the Observer as a
// redelivery, from the delivery's Redelivered flag; the same event
// published again is a republish.
func TestDuplicateReasons(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	obs := h.observe(t)
	q := h.queue("reasons", nil)
	id := inboxtest.NewID()
	h.publish(q, id, event{N: 1})
	var calls atomic.Int32
	crashed := make(chan struct{})
	first := h.start(h.config(q), h.effectHandler(&calls), crashAt(fault.AfterCommitBeforeAck, func(r *running) {
		r.crash()
		close(crashed)
	}))
	waitClosed(t, "the first consumer to commit", crashed)
	first.stop()

	second := h.start(h.config(q), h.effectHandler(&calls), nil)
	eventually(t, "the redelivery", func() bool { return obs.Get().Duplicates == 1 })
	got := obs.Get()
	require.Equal(t, 1, got.Redelivered, "%+v", got)
	require.Zero(t, got.Republished, "%+v", got)

	h.publish(q, id, event{N: 1})
	eventually(t, "the republish", func() bool { return obs.Get().Duplicates == 2 })
	second.stop()
	got = obs.Get()
	require.Equal(t, 1, got.Redelivered, "%+v", got)
	require.Equal(t, 1, got.Republished, "%+v", got)
	require.Equal(t, int32(1), calls.Load())
	require.Equal(t, 1, h.effectCount(id))
}

// TestKeyFuncErrorIsMalformedID: a custom KeyFunc's plain error is the
// message's: dead-lettered at once as malformed_id with no attempt (its
// handler never ran), as on every transport.
func TestKeyFuncErrorIsMalformedID(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	q := h.queue("keyfunc", nil)
	good := inboxtest.NewID()
	h.publish(q, good, event{N: 1})
	h.publish(q, "", event{N: 2})
	cfg := h.config(q)
	cfg.Key = func(msg inbox.Message) (string, error) {
		if msg.Headers["event-id"] == "" {
			return "", errors.New("the id field is encrypted with a key we lost")
		}
		return inbox.HeaderKey("event-id")(msg)
	}
	var calls atomic.Int32
	r := h.start(cfg, h.effectHandler(&calls), nil)
	var ds []*inboxtype.DeadLetter
	eventually(t, "the dead letter", func() bool {
		var err error
		ds, err = h.client.ListDeadLetters(context.Background(), inbox.ListDeadLettersParams{Consumer: "billing", Limit: 10})
		require.NoError(t, err)
		return len(ds) == 1 && h.effectCount(good) == 1
	})
	r.stop()
	require.Equal(t, inbox.ReasonMalformedID, ds[0].Reason)
	require.Equal(t, 0, ds[0].Attempts)
	require.Contains(t, ds[0].Error, "encrypted with a key we lost")
	require.Equal(t, 0, h.ready(q))
}

// TestBatchFillsFromPrefetch: deliveries already prefetched fill a batch,
// instead of one delivery per transaction.
func TestBatchFillsFromPrefetch(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	obs := h.observe(t)
	q := h.queue("fill", nil)
	const n = 200
	ids := make([]string, n)
	for i := range ids {
		ids[i] = inboxtest.NewID()
		h.publish(q, ids[i], event{N: i})
	}
	cfg := h.config(q)
	cfg.Workers, cfg.Batch, cfg.Prefetch = 1, 50, 100
	var calls atomic.Int32
	var gate sync.Once
	effect := h.effectHandler(&calls)
	handler := inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
		// The first transaction waits until the broker has sent a
		// prefetch's worth: they are on their way to the worker.
		gate.Do(func() {
			eventually(t, "the broker to send the prefetch", func() bool { return h.ready(q) <= n-cfg.Prefetch })
		})
		return effect.Handle(ctx, tx, msg)
	})
	r := h.start(cfg, handler, nil)
	eventually(t, "every message applied", func() bool { return obs.Get().Messages >= n })
	r.stop()
	got := obs.Get()
	require.Greater(t, got.MaxMessages, 1, "a batch holds what was prefetched: %+v", got)
	require.LessOrEqual(t, got.MaxMessages, cfg.Batch, "%+v", got)
	t.Logf("%d messages in %d transactions, at most %d in one", got.Messages, got.Txs, got.MaxMessages)
}
