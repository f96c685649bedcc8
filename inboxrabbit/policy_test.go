package inboxrabbit_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxtest"
	"github.com/txinbox/inbox/internal/txcount"
)

func (h *harness) observe(t *testing.T) *txcount.Observer {
	obs := &txcount.Observer{}
	var err error
	h.client, err = inbox.NewClient(h.client.Driver(), &inbox.Config{Observer: obs})
	require.NoError(t, err)
	return obs
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
	cfg.Workers, cfg.MaxBatch, cfg.Prefetch = 1, 50, 100
	var calls atomic.Int32
	var gate sync.Once
	effect := h.fx.Handler(&calls)
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
	require.LessOrEqual(t, got.MaxMessages, cfg.MaxBatch, "%+v", got)
	t.Logf("%d messages in %d transactions, at most %d in one", got.Messages, got.Txs, got.MaxMessages)
}

// TestBatchWait: with BatchWait, a receive that has its first delivery
// waits for the rest of its batch, and the batch commits as one
// transaction; a delivery with nothing behind it goes once BatchWait has
// passed.
func TestBatchWait(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		wait time.Duration
		// msgs are published one by one, the second once the broker has
		// handed the first out: without BatchWait the first would go
		// alone.
		msgs int
	}{
		// Longer than the test: the batch must fill, not time out.
		{"fills the batch", 10 * time.Minute, 5},
		{"lets a lone message go", 20 * time.Millisecond, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			obs := h.observe(t)
			q := h.queue("batch-wait", nil)
			cfg := h.config(q)
			cfg.Workers, cfg.MaxBatch, cfg.BatchWait = 1, 5, tc.wait
			var calls atomic.Int32
			r := h.start(cfg, h.fx.Handler(&calls), nil)
			ids := make([]string, tc.msgs)
			for i := range ids {
				if i == 1 {
					eventually(t, "the broker to hand the first message out", func() bool { return h.ready(q) == 0 })
				}
				ids[i] = inboxtest.NewID()
				h.publish(q, ids[i], event{N: i})
			}
			eventually(t, "every message applied", func() bool { return obs.Get().Messages >= len(ids) })
			r.stop()
			got := obs.Get()
			require.Equal(t, 1, got.Txs, "one transaction: %+v", got)
			require.Equal(t, len(ids), got.MaxMessages, "%+v", got)
			for _, id := range ids {
				require.Equal(t, 1, h.fx.Count(t, id))
			}
		})
	}
}
