package inboxnats_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxnats"
	"github.com/txinbox/inbox/inboxtest"
	"github.com/txinbox/inbox/internal/fault"
	"github.com/txinbox/inbox/internal/require"
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

// requireStoppedAfterCrash checks the error of a Run whose connection a
// crash closed: ErrClosed, or nil if its context was cancelled first.
func requireStoppedAfterCrash(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		require.ErrorIs(t, err, inboxnats.ErrClosed)
	}
}

// (a) A consumer dies after its transaction committed and before its ack:
// the message comes back, and the redelivery is a skip.
func TestCrashAfterCommitBeforeAck(t *testing.T) {
	t.Parallel()
	h := newHarness(t, machineServer(t))
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
	require.Equal(t, 1, h.effectCount(id), "the first delivery committed")
	require.Equal(t, 1, h.info(durable).NumAckPending, "the crashed consumer did not ack")

	h.start(h.config(durable), h.effectHandler(&calls), nil)
	info := h.waitSettled(durable)
	require.Equal(t, uint64(2), info.Delivered.Consumer, "the message was delivered twice")
	require.Equal(t, int32(1), calls.Load(), "the redelivery was skipped: the handler did not run again")
	require.Equal(t, 1, h.effectCount(id))
}

// (b) A consumer dies after the handler's effect and before the commit:
// the effect rolls back, and the redelivery applies it once.
func TestCrashBeforeCommit(t *testing.T) {
	t.Parallel()
	h := newHarness(t, machineServer(t))
	durable := h.durable(nil)
	id := inboxtest.NewID()
	h.publish(id, event{N: 1})
	var calls atomic.Int32
	var backend atomic.Uint32
	handler := inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
		calls.Add(1)
		var pid uint32
		if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			return err
		}
		backend.Store(pid)
		_, err := h.applyEffect(ctx, tx, msg)
		return err
	})

	crashed := make(chan struct{})
	first := h.start(h.config(durable), handler, crashAt(fault.AfterEffectBeforeCommit, func(r *running) {
		r.crash()
		// The process "dies" with its transaction open: Postgres ends
		// the session and rolls the effect back.
		var ok bool
		err := h.pool.QueryRow(context.Background(), `SELECT pg_terminate_backend($1, 10000)`, backend.Load()).Scan(&ok)
		if err != nil || !ok {
			t.Errorf("terminate backend %d: %v, %v", backend.Load(), ok, err)
		}
		close(crashed)
	}))
	waitClosed(t, "the first consumer to apply the effect", crashed)
	requireStoppedAfterCrash(t, first.stop())
	require.Equal(t, 0, h.effectCount(id), "the crash rolled the effect back")

	h.start(h.config(durable), handler, nil)
	info := h.waitSettled(durable)
	require.Equal(t, uint64(2), info.Delivered.Consumer, "the message was delivered twice")
	require.Equal(t, int32(2), calls.Load(), "the redelivery applied it")
	require.Equal(t, 1, h.effectCount(id))
}

// (c) One event published twice (a producer retry past the stream's
// Duplicates window, or without Nats-Msg-Id): two stream messages, applied
// once, both acked. A republish with the same Nats-Msg-Id inside the
// window is dropped by the server before any consumer.
func TestSameEventPublishedTwice(t *testing.T) {
	t.Parallel()
	h := newHarness(t, machineServer(t))
	durable := h.durable(nil)
	id := inboxtest.NewID()
	seq1 := h.publish(id, event{N: 1})
	seq2 := h.publish(id, event{N: 1})
	require.NotEqual(t, seq1, seq2, "two stream messages")
	// In one batch as well as across batches.
	id2 := inboxtest.NewID()
	h.publish(id2, event{N: 2}, jetstream.WithMsgID(id2))
	seq4 := h.publish(id2, event{N: 2}, jetstream.WithMsgID(id2))
	require.Equal(t, uint64(3), seq4, "the server dropped the republish with the same Nats-Msg-Id")
	id3 := inboxtest.NewID()
	h.publish(id3, event{N: 3})
	h.publish(id3, event{N: 3})

	var calls atomic.Int32
	cfg := h.config(durable)
	cfg.Workers = 2
	cfg.Batch = 1 // two workers can take one copy each
	h.start(cfg, h.effectHandler(&calls), nil)
	info := h.waitSettled(durable)
	require.Equal(t, uint64(5), info.Delivered.Stream, "every stream message was delivered")
	require.Equal(t, int32(3), calls.Load())
	for _, e := range []string{id, id2, id3} {
		require.Equal(t, 1, h.effectCount(e))
	}

	// The same in one batch.
	h2 := newHarness(t, machineServer(t))
	durable2 := h2.durable(nil)
	id4 := inboxtest.NewID()
	h2.publish(id4, event{N: 4})
	h2.publish(id4, event{N: 4})
	var calls2 atomic.Int32
	cfg2 := h2.config(durable2)
	cfg2.Workers = 1
	h2.start(cfg2, h2.effectHandler(&calls2), nil)
	h2.waitSettled(durable2)
	require.Equal(t, int32(1), calls2.Load())
	require.Equal(t, 1, h2.effectCount(id4))
}

// (d) A transaction slower than AckWait: InProgress keeps the message from
// being delivered to the other workers meanwhile.
func TestSlowHandlerIsNotDeliveredTwice(t *testing.T) {
	t.Parallel()
	h := newHarness(t, machineServer(t))
	durable := h.durable(nil)
	id := inboxtest.NewID()
	h.publish(id, event{N: 1})
	var calls atomic.Int32
	started := make(chan struct{})
	release := make(chan struct{})
	handler := inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
		if calls.Add(1) == 1 {
			close(started)
		}
		select {
		case <-release:
		case <-ctx.Done():
			return ctx.Err()
		}
		_, err := h.applyEffect(ctx, tx, msg)
		return err
	})
	cfg := h.config(durable)
	cfg.Workers = 4 // idle workers keep fetching while the handler runs
	h.start(cfg, handler, nil)
	// A second process on the same JetStream consumer.
	h.start(cfg, handler, nil)
	waitClosed(t, "the handler to start", started)
	began := time.Now()
	eventually(t, "the handler to run for three AckWaits", func() bool {
		info := h.info(durable)
		require.Equal(t, uint64(1), info.Delivered.Consumer, "no worker may get the message again meanwhile")
		require.Equal(t, 0, info.NumRedelivered)
		return time.Since(began) > 3*testAckWait
	})
	close(release)
	info := h.waitSettled(durable)
	require.Equal(t, uint64(1), info.Delivered.Consumer, "delivered once")
	require.Equal(t, int32(1), calls.Load())
	require.Equal(t, 1, h.effectCount(id))
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

// (e) Poison messages are dead-lettered with their reason and terminated,
// and the rest are applied.
func TestPoisonIsDeadLetteredAndTerminated(t *testing.T) {
	t.Parallel()
	h := newHarness(t, machineServer(t))
	durable := h.durable(nil)
	terminated := h.terminated(durable)
	good := inboxtest.NewID()
	permanent := inboxtest.NewID()
	failing := inboxtest.NewID()
	seqs := map[string]uint64{
		"good":      h.publish(good, event{N: 1}),
		"permanent": h.publish(permanent, event{N: 2, Poison: "permanent"}),
		"retryable": h.publish(failing, event{N: 3, Poison: "retryable"}),
		"no_id":     h.publish("", event{N: 4}),
		"malformed": h.publish("not-a-uuid", event{N: 5}),
	}
	good2 := inboxtest.NewID()
	seqs["good2"] = h.publish(good2, event{N: 6})
	var calls atomic.Int32
	handler := inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
		calls.Add(1)
		e, err := h.applyEffect(ctx, tx, msg)
		if err != nil {
			return err
		}
		switch e.Poison {
		case "permanent":
			return inbox.Permanent(errors.New("amount is negative"))
		case "retryable":
			return errors.New("downstream says no")
		}
		return nil
	})
	cfg := h.config(durable)
	cfg.MaxDeliver = 2
	h.start(cfg, handler, nil)
	info := h.waitSettled(durable)
	require.GreaterOrEqual(t, info.Delivered.Consumer, uint64(7), "the retryable one was delivered twice")

	require.Equal(t, 1, h.effectCount(good))
	require.Equal(t, 1, h.effectCount(good2))
	require.Equal(t, 0, h.effectCount(permanent), "a failed handler's effect rolled back")
	require.Equal(t, 0, h.effectCount(failing))

	dls, err := h.client.ListDeadLetters(context.Background(), inbox.ListDeadLettersParams{Consumer: "billing", Limit: 100})
	require.NoError(t, err)
	reasons := map[uint64]string{}
	attempts := map[uint64]int{}
	for _, d := range dls {
		require.Equal(t, inboxnats.Transport, d.Transport)
		require.Equal(t, h.stream, d.Queue)
		reasons[uint64(d.Offset)] = d.Reason
		attempts[uint64(d.Offset)] = d.Attempts
	}
	require.Equal(t, map[uint64]string{
		seqs["permanent"]: inbox.ReasonPermanent,
		seqs["retryable"]: inbox.ReasonMaxAttempts,
		seqs["no_id"]:     inbox.ReasonNoID,
		seqs["malformed"]: inbox.ReasonMalformedID,
	}, reasons)
	require.Equal(t, 2, attempts[seqs["retryable"]])

	eventually(t, "four terminated advisories", func() bool { return len(terminated()) >= 4 })
	got := map[uint64]bool{}
	for _, s := range terminated() {
		got[s] = true
	}
	require.Equal(t, map[uint64]bool{
		seqs["permanent"]: true, seqs["retryable"]: true, seqs["no_id"]: true, seqs["malformed"]: true,
	}, got, "each poison message was terminated, and only those")
}

// (f) A JetStream consumer with MaxAckPending 1, consumed with Ordered,
// applies the stream in order: a retried message holds back the ones after
// it, a dead-lettered one lets them through, whatever the number of
// processes that pull.
func TestOrderKeptWithMaxAckPendingOne(t *testing.T) {
	t.Parallel()
	h := newHarness(t, machineServer(t))
	durable := h.durable(func(cc *jetstream.ConsumerConfig) { cc.MaxAckPending = 1 })
	const n = 12
	ids := make([]string, n)
	for i := range n {
		ids[i] = inboxtest.NewID()
		e := event{N: i}
		if i == 8 {
			e.Poison = "permanent"
		}
		h.publish(ids[i], e)
	}
	var failed atomic.Bool
	handler := inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
		e, err := h.applyEffect(ctx, tx, msg)
		if err != nil {
			return err
		}
		switch {
		case e.N == 4 && failed.CompareAndSwap(false, true):
			return errors.New("try again")
		case e.Poison == "permanent":
			return inbox.Permanent(errors.New("poison"))
		}
		return nil
	})
	cfg := h.config(durable)
	cfg.Ordered = true
	h.start(cfg, handler, nil)
	h.start(cfg, handler, nil) // a second process on the same JetStream consumer
	h.waitSettled(durable)
	require.True(t, failed.Load())
	require.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7, 9, 10, 11}, h.effectOrder())
	dls, err := h.client.ListDeadLetters(context.Background(), inbox.ListDeadLettersParams{Consumer: "billing", Limit: 10})
	require.NoError(t, err)
	require.Len(t, dls, 1)
	require.Equal(t, ids[8], dls[0].MessageID)
}

// Ordered refuses a JetStream consumer that would not keep order.
func TestOrderedNeedsMaxAckPendingOne(t *testing.T) {
	t.Parallel()
	h := newHarness(t, machineServer(t))
	durable := h.durable(func(cc *jetstream.ConsumerConfig) { cc.MaxAckPending = 10 })
	cfg := h.config(durable)
	cfg.Ordered = true
	c, err := inboxnats.New(h.js, h.client, h.effectHandler(new(atomic.Int32)), cfg)
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
	const n = 60
	ids := make([]string, n)
	for i := range n {
		ids[i] = inboxtest.NewID()
		h.publish(ids[i], event{N: i})
	}
	var calls atomic.Int32
	cut := make(chan struct{})
	cfg := h.config(durable)
	cfg.Batch = 20
	r := h.start(cfg, h.effectHandler(&calls), crashAt(fault.MidBatch, func(r *running) {
		r.proxy.Cut()
		close(cut)
	}))
	waitClosed(t, "the connection to be cut mid-batch", cut)
	h.waitSettled(durable)
	for i, id := range ids {
		require.Equal(t, 1, h.effectCount(id), "event %d", i)
	}
	require.GreaterOrEqual(t, r.proxy.Accepted(), 2, "the client reconnected")
	require.NoError(t, r.stop())
}

// (g) The server itself restarts while a batch's transaction is open: the
// stream and the consumer's state survive on disk, the client reconnects,
// and every event is applied exactly once and acknowledged.
func TestServerRestartMidBatch(t *testing.T) {
	t.Parallel()
	srv := embeddedServer(t)
	h := newHarness(t, srv)
	durable := h.durable(nil)
	const n = 60
	ids := make([]string, n)
	for i := range n {
		ids[i] = inboxtest.NewID()
		h.publish(ids[i], event{N: i})
	}
	var calls atomic.Int32
	restarted := make(chan struct{})
	cfg := h.config(durable)
	cfg.Batch = 20
	r := h.start(cfg, h.effectHandler(&calls), crashAt(fault.MidBatch, func(r *running) {
		srv.restart(t)
		close(restarted)
	}))
	waitClosed(t, "the server to restart mid-batch", restarted)
	h.waitSettled(durable)
	for i, id := range ids {
		require.Equal(t, 1, h.effectCount(id), "event %d", i)
	}
	require.NoError(t, r.stop())
}

// Run returns ErrClosed when the caller closes the connection under it.
func TestRunReturnsWhenTheConnectionCloses(t *testing.T) {
	t.Parallel()
	h := newHarness(t, machineServer(t))
	durable := h.durable(nil)
	id := inboxtest.NewID()
	h.publish(id, event{N: 1})
	var calls atomic.Int32
	r := h.start(h.config(durable), h.effectHandler(&calls), nil)
	h.waitSettled(durable)
	r.nc.Close()
	select {
	case err := <-r.done:
		require.ErrorIs(t, err, inboxnats.ErrClosed)
		r.done <- err // for stop
	case <-time.After(waitDeadline):
		t.Fatal("Run did not return after the connection closed")
	}
	require.Equal(t, 1, h.effectCount(id))
}

// Run refuses a JetStream consumer that does not exist, or whose acks are
// not explicit.
func TestRunChecksTheJetStreamConsumer(t *testing.T) {
	t.Parallel()
	h := newHarness(t, machineServer(t))
	handler := h.effectHandler(new(atomic.Int32))
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
	cfg.MaxDeliver = 5
	c, err = inboxnats.New(h.js, h.client, handler, cfg)
	require.NoError(t, err)
	require.ErrorContains(t, c.Run(context.Background()), "exceeds the JetStream consumer's MaxDeliver")
}
