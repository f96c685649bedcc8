package inboxsqs_test

import (
	"sync/atomic"
	"testing"

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
	got := obs.Get()
	require.Equal(t, 1, got.Duplicates, "%+v", got)
	require.Equal(t, 1, got.Redelivered, "%+v", got)
	require.Zero(t, got.Republished, "%+v", got)

	again := h.send(q, event{EventID: id}.body(), "")
	h.waitDeleted(again)
	got = obs.Get()
	require.Equal(t, 2, got.Duplicates, "%+v", got)
	require.Equal(t, 1, got.Redelivered, "%+v", got)
	require.Equal(t, 1, got.Republished, "%+v", got)
	require.Equal(t, int32(1), calls.Load())
	require.Equal(t, 1, h.effectCount(id))
}
