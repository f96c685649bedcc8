package inboxnats_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxnats"
	"github.com/txinbox/inbox/inboxtest"
	"github.com/txinbox/inbox/internal/fault"
)

// crashAt returns a Run context wrapper whose hook runs crash once, the
// first time the consumer reaches point.
func crashAt(point fault.Point, crash func(*running)) func(*running, context.Context) context.Context {
	var once sync.Once
	return func(r *running, ctx context.Context) context.Context {
		return fault.WithHook(ctx, func(p fault.Point) {
			if p == point {
				once.Do(func() { crash(r) })
			}
		})
	}
}

// terminated collects the stream sequences the server reports terminated
// for a JetStream consumer.
func (h *harness) terminated(durable string) func() []uint64 {
	h.t.Helper()
	var mu sync.Mutex
	var seqs []uint64
	sub, err := h.admin.Subscribe("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED."+h.stream+"."+durable, func(m *nats.Msg) {
		var adv struct {
			StreamSeq uint64 `json:"stream_seq"`
		}
		if json.Unmarshal(m.Data, &adv) == nil {
			mu.Lock()
			seqs = append(seqs, adv.StreamSeq)
			mu.Unlock()
		}
	})
	require.NoError(h.t, err)
	require.NoError(h.t, h.admin.Flush())
	h.t.Cleanup(func() { _ = sub.Unsubscribe() })
	return func() []uint64 {
		mu.Lock()
		defer mu.Unlock()
		return append([]uint64(nil), seqs...)
	}
}

// A dead-lettered message is terminated, not acknowledged, so that the
// server never delivers it again, whatever the JetStream consumer's
// MaxDeliver; the suite checks the dead letters themselves.
func TestDeadLetterIsTerminated(t *testing.T) {
	t.Parallel()
	h := newHarness(t, machineServer(t))
	durable := h.durable(nil)
	terminated := h.terminated(durable)
	good, permanent := inboxtest.NewID(), inboxtest.NewID()
	h.publish(good, event{N: 1})
	seq := h.publish(permanent, event{N: 2, Poison: "permanent"})
	handler := inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
		e, err := h.fx.ApplyEvent(ctx, tx, msg)
		if err == nil && e.Poison != "" {
			err = inbox.Permanent(errors.New("amount is negative"))
		}
		return err
	})
	h.start(h.config(durable), handler, nil)
	h.waitSettled(durable)
	require.Equal(t, 1, h.fx.Count(h.t, good))
	eventually(t, "the terminated advisory", func() bool { return len(terminated()) >= 1 })
	require.Equal(t, []uint64{seq}, terminated(), "the poison message was terminated, and only it")
}

// Ordered refuses a JetStream consumer that would not keep order.
func TestOrderedNeedsMaxAckPendingOne(t *testing.T) {
	t.Parallel()
	h := newHarness(t, machineServer(t))
	durable := h.durable(func(cc *jetstream.ConsumerConfig) { cc.MaxAckPending = 10 })
	cfg := h.config(durable)
	cfg.Ordered = true
	c, err := inboxnats.New(h.js, h.client, h.fx.Handler(new(atomic.Int32)), cfg)
	require.NoError(t, err)
	err = c.Run(context.Background())
	require.ErrorContains(t, err, "MaxAckPending 1")
}

// (g) The connection to the server is cut while a batch's transaction is
// open: the client reconnects, and every event is applied exactly once and
// acknowledged.
func TestConnectionLossMidBatch(t *testing.T) {
	t.Parallel()
	h := newHarness(t, machineServer(t))
	durable := h.durable(nil)
	ids := h.publishN(60)
	var calls atomic.Int32
	cut := make(chan struct{})
	cfg := h.config(durable)
	cfg.MaxBatch = 20
	r := h.start(cfg, h.fx.Handler(&calls), crashAt(fault.MidBatch, func(r *running) {
		r.proxy.Cut()
		close(cut)
	}))
	waitClosed(t, "the connection to be cut mid-batch", cut)
	h.waitSettled(durable)
	for i, id := range ids {
		require.Equal(t, 1, h.fx.Count(h.t, id), "event %d", i)
	}
	require.GreaterOrEqual(t, r.proxy.Accepted(), 2, "the client reconnected")
	require.NoError(t, r.Stop())
}

// (g) The server itself restarts while a batch's transaction is open: the
// stream and the consumer's state survive on disk, the client reconnects,
// and every event is applied exactly once and acknowledged.
func TestServerRestartMidBatch(t *testing.T) {
	t.Parallel()
	srv := embeddedServer(t)
	h := newHarness(t, srv)
	durable := h.durable(nil)
	ids := h.publishN(60)
	var calls atomic.Int32
	restarted := make(chan struct{})
	cfg := h.config(durable)
	cfg.MaxBatch = 20
	r := h.start(cfg, h.fx.Handler(&calls), crashAt(fault.MidBatch, func(r *running) {
		srv.restart(t)
		close(restarted)
	}))
	waitClosed(t, "the server to restart mid-batch", restarted)
	h.waitSettled(durable)
	for i, id := range ids {
		require.Equal(t, 1, h.fx.Count(h.t, id), "event %d", i)
	}
	require.NoError(t, r.Stop())
}

// Run returns ErrClosed when the caller closes the connection under it.
func TestRunReturnsWhenTheConnectionCloses(t *testing.T) {
	t.Parallel()
	h := newHarness(t, machineServer(t))
	durable := h.durable(nil)
	id := inboxtest.NewID()
	h.publish(id, event{N: 1})
	var calls atomic.Int32
	r := h.start(h.config(durable), h.fx.Handler(&calls), nil)
	h.waitSettled(durable)
	r.nc.Close()
	require.ErrorIs(t, r.Returned(), inboxnats.ErrClosed)
	require.Equal(t, 1, h.fx.Count(h.t, id))
}

// Run refuses a JetStream consumer that does not exist, or whose acks are
// not explicit.
func TestRunChecksTheJetStreamConsumer(t *testing.T) {
	t.Parallel()
	h := newHarness(t, machineServer(t))
	handler := h.fx.Handler(new(atomic.Int32))
	c, err := inboxnats.New(h.js, h.client, handler, h.config("missing"))
	require.NoError(t, err)
	require.ErrorIs(t, c.Run(context.Background()), jetstream.ErrConsumerNotFound)

	durable := h.durable(func(cc *jetstream.ConsumerConfig) {
		cc.Durable = "acknone"
		cc.AckPolicy = jetstream.AckNonePolicy
	})
	c, err = inboxnats.New(h.js, h.client, handler, h.config(durable))
	require.NoError(t, err)
	require.ErrorContains(t, c.Run(context.Background()), "AckExplicitPolicy")

	durable = h.durable(func(cc *jetstream.ConsumerConfig) {
		cc.Durable = "limited"
		cc.MaxDeliver = 3
	})
	cfg := h.config(durable)
	cfg.MaxDeliveries = 5
	c, err = inboxnats.New(h.js, h.client, handler, cfg)
	require.NoError(t, err)
	require.ErrorContains(t, c.Run(context.Background()), "exceeds the JetStream consumer's MaxDeliver")
}
