package inboxnats_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxnats"
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

// TestDuplicateReasons: a message JetStream delivered again after its
// transaction committed (a lost ack) reaches the Observer as a redelivery,
// from its NumDelivered; the same event published again is a republish.
func TestDuplicateReasons(t *testing.T) {
	t.Parallel()
	h := newHarness(t, machineServer(t))
	obs := h.observe(t)
	durable := h.durable(nil)
	id := inboxtest.NewID()
	h.publish(id, event{N: 1})
	var calls atomic.Int32
	crashed := make(chan struct{})
	first := h.start(h.config(durable), h.effectHandler(&calls), crashAt(fault.AfterCommitBeforeAck, func(r *running) {
		r.crash()
		close(crashed)
	}))
	waitClosed(t, "the first consumer to commit", crashed)
	requireStoppedAfterCrash(t, first.stop())

	h.start(h.config(durable), h.effectHandler(&calls), nil)
	eventually(t, "the redelivery", func() bool { return obs.Get().Duplicates == 1 })
	got := obs.Get()
	require.Equal(t, 1, got.Redelivered, "%+v", got)
	require.Zero(t, got.Republished, "%+v", got)

	h.publish(id, event{N: 1})
	eventually(t, "the republish", func() bool { return obs.Get().Duplicates == 2 })
	got = obs.Get()
	require.Equal(t, 1, got.Redelivered, "%+v", got)
	require.Equal(t, 1, got.Republished, "%+v", got)
	require.Equal(t, int32(1), calls.Load())
	require.Equal(t, 1, h.effectCount(id))
}

// TestKeyFuncErrorIsMalformedID: a custom KeyFunc's plain error is the
// message's: dead-lettered at once as malformed_id with no attempt (its
// handler never ran), and terminated, as on every transport.
func TestKeyFuncErrorIsMalformedID(t *testing.T) {
	t.Parallel()
	h := newHarness(t, machineServer(t))
	durable := h.durable(nil)
	good := inboxtest.NewID()
	h.publish(good, event{N: 1})
	h.publish("", event{N: 2})
	cfg := h.config(durable)
	cfg.Key = func(msg inbox.Message) (string, error) {
		if msg.Headers[inboxnats.HeaderEventID] == "" {
			return "", errors.New("the id field is encrypted with a key we lost")
		}
		return inbox.HeaderKey(inboxnats.HeaderEventID)(msg)
	}
	var calls atomic.Int32
	h.start(cfg, h.effectHandler(&calls), nil)
	h.waitSettled(durable)
	require.Equal(t, 1, h.effectCount(good))
	ds, err := h.client.ListDeadLetters(context.Background(), inbox.ListDeadLettersParams{Consumer: "billing", Limit: 10})
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.Equal(t, inbox.ReasonMalformedID, ds[0].Reason)
	require.Equal(t, 0, ds[0].Attempts)
	require.Contains(t, ds[0].Error, "encrypted with a key we lost")
}
