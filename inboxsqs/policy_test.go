package inboxsqs_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxtest"
	"github.com/txinbox/inbox/internal/fault"
	"github.com/txinbox/inbox/internal/require"
)

// txCounter is an Observer that sums its TxEvents.
type txCounter struct {
	mu sync.Mutex
	n  txTally
}

type txTally struct {
	txs, msgs, duplicates, redelivered, repub int
	maxMsgs                                   int
}

func (o *txCounter) TxStart(ctx context.Context, _ string, _ []inbox.Message) context.Context {
	return ctx
}
func (o *txCounter) DeadLettered(context.Context, *inbox.DeadLetterEvent) {}
func (o *txCounter) TxEnd(_ context.Context, e *inbox.TxEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.n.txs++
	o.n.msgs += e.Messages
	o.n.maxMsgs = max(o.n.maxMsgs, e.Messages)
	o.n.duplicates += e.Duplicates
	o.n.redelivered += e.Redelivered
	o.n.repub += e.Republished
}

func (o *txCounter) get() txTally {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n
}

func (h *harness) observe(t *testing.T) *txCounter {
	obs := &txCounter{}
	var err error
	h.client, err = inbox.NewClient(h.client.Driver(), &inbox.Config{Observer: obs})
	require.NoError(t, err)
	return obs
}

// TestDuplicateReasons: a message SQS handed out again after its
// transaction committed (a lost delete) reaches the Observer as a
// redelivery, from its ApproximateReceiveCount; the same event sent again
// is a republish.
func TestDuplicateReasons(t *testing.T) {
	h := newHarness(t)
	obs := h.observe(t)
	q := h.createQueue("counted-reasons", false)
	id := inboxtest.NewID()
	mid := h.send(q, event{EventID: id}.body(), "")
	var calls atomic.Int32
	crashed := make(chan struct{})
	first := h.start(h.config(q), h.effectHandler(&calls), crashAt(fault.AfterCommitBeforeAck, func(r *running) {
		r.cutNetwork()
		close(crashed)
	}))
	waitClosed(t, "the first consumer to commit", crashed)
	first.stop()

	h.start(h.config(q), h.effectHandler(&calls), nil)
	h.waitDeleted(mid)
	got := obs.get()
	require.Equal(t, 1, got.duplicates, "%+v", got)
	require.Equal(t, 1, got.redelivered, "%+v", got)
	require.Zero(t, got.repub, "%+v", got)

	again := h.send(q, event{EventID: id}.body(), "")
	h.waitDeleted(again)
	got = obs.get()
	require.Equal(t, 2, got.duplicates, "%+v", got)
	require.Equal(t, 1, got.redelivered, "%+v", got)
	require.Equal(t, 1, got.repub, "%+v", got)
	require.Equal(t, int32(1), calls.Load())
	require.Equal(t, 1, h.effectCount(id))
}
