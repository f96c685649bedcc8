package inboxrabbit_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxrabbit"
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

// (a) A consumer dies after its transaction committed and before its ack:
// the broker requeues the delivery, and the redelivery is a skip.
func TestCrashAfterCommitBeforeAck(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	q := h.queue("a", nil)
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
	require.Equal(t, 1, h.effectCount(id), "the first delivery committed")
	// The broker requeues the delivery once it sees the connection gone.
	eventually(t, "the broker to requeue the unacknowledged delivery", func() bool { return h.ready(q) == 1 })

	second := h.start(h.config(q), h.effectHandler(&calls), nil)
	eventually(t, "the redelivery", func() bool { return h.delivered(id) >= 2 })
	second.stop()
	require.Equal(t, 0, h.ready(q), "the redelivery was acked")
	require.Equal(t, int32(1), calls.Load(), "the redelivery was skipped: the handler did not run again")
	require.Equal(t, 1, h.effectCount(id))
}

// (b) A consumer dies after the handler's effect and before the commit:
// the effect rolls back, and the redelivery applies it once.
func TestCrashBeforeCommit(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	q := h.queue("b", nil)
	id := inboxtest.NewID()
	h.publish(q, id, event{N: 1})
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
	first := h.start(h.config(q), handler, crashAt(fault.AfterEffectBeforeCommit, func(r *running) {
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
	first.stop()
	require.Equal(t, 0, h.effectCount(id), "the crash rolled the effect back")
	require.Equal(t, 1, h.ready(q))

	second := h.start(h.config(q), handler, nil)
	eventually(t, "the redelivery applied", func() bool { return h.effectCount(id) == 1 })
	second.stop()
	require.Equal(t, 0, h.ready(q))
	require.Equal(t, 2, h.delivered(id))
	require.Equal(t, int32(2), calls.Load(), "the redelivery applied it")
	require.Equal(t, 1, h.effectCount(id))
}

// (c) One event published twice (a producer retry): two deliveries,
// applied once, both acked; in parallel batches and in one batch.
func TestSameEventPublishedTwice(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name           string
		workers, batch int
	}{
		{"two_workers", 2, 1},
		{"one_batch", 1, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			q := h.queue("c", nil)
			id := inboxtest.NewID()
			h.publish(q, id, event{N: 1})
			h.publish(q, id, event{N: 1})
			var calls atomic.Int32
			cfg := h.config(q)
			cfg.Workers, cfg.Batch = tc.workers, tc.batch
			r := h.start(cfg, h.effectHandler(&calls), nil)
			eventually(t, "both deliveries", func() bool { return h.delivered(id) == 2 })
			r.stop()
			require.Equal(t, 0, h.ready(q), "both were acked")
			require.Equal(t, int32(1), calls.Load())
			require.Equal(t, 1, h.effectCount(id))
		})
	}
}

// (d) A handler much slower than usual: RabbitMQ has no ack deadline short
// of the consumer timeout (see the package documentation), and does not
// hand a delivery to another consumer while its channel lives, so it is
// not delivered twice meanwhile.
func TestSlowHandlerIsNotDeliveredTwice(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	q := h.queue("d", nil)
	id := inboxtest.NewID()
	h.publish(q, id, event{N: 1})
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
	cfg := h.config(q)
	first := h.start(cfg, handler, nil)
	second := h.start(cfg, handler, nil) // another process on the queue
	waitClosed(t, "the handler to start", started)
	began := time.Now()
	eventually(t, "the handler to run for three seconds", func() bool {
		require.Equal(t, 1, h.delivered(id), "no consumer may get the message again meanwhile")
		return time.Since(began) > 3*time.Second
	})
	close(release)
	eventually(t, "the effect", func() bool { return h.effectCount(id) == 1 })
	first.stop()
	second.stop()
	require.Equal(t, 0, h.ready(q))
	require.Equal(t, 1, h.delivered(id))
	require.Equal(t, int32(1), calls.Load())
}

// (d) On a broker with per-queue consumer timeouts (RabbitMQ 3.12 and
// later), a transaction that outlives the timeout loses its channel: the
// transaction still commits, its ack is skipped, the consumer reconnects,
// and the redelivery is a skip.
func TestConsumerTimeoutOutlived(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	if v, _ := h.admin.Properties["version"].(string); !versionAtLeast(v, 3, 12) {
		t.Skipf("RabbitMQ %s has no per-queue consumer timeout (3.12 and later)", v)
	}
	q := h.queue("d-timeout", amqp.Table{"x-consumer-timeout": int64(1000)})
	id := inboxtest.NewID()
	h.publish(q, id, event{N: 1})
	var calls atomic.Int32
	handler := inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
		if calls.Add(1) == 1 {
			// Outlive the timeout: the broker closes the channel
			// (checked about once a second).
			began := time.Now()
			for time.Since(began) < 5*time.Second && ctx.Err() == nil {
				time.Sleep(50 * time.Millisecond)
			}
		}
		_, err := h.applyEffect(ctx, tx, msg)
		return err
	})
	r := h.start(h.config(q), handler, nil)
	eventually(t, "the redelivery", func() bool { return h.delivered(id) >= 2 })
	r.stop()
	require.Equal(t, 0, h.ready(q))
	require.GreaterOrEqual(t, r.dials.Load(), int32(2), "the consumer reconnected")
	require.Equal(t, int32(1), calls.Load(), "the redelivery was skipped")
	require.Equal(t, 1, h.effectCount(id))
}

// versionAtLeast reports whether a RabbitMQ version such as "3.10.8" is at
// least major.minor.
func versionAtLeast(v string, major, minor int) bool {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return false
	}
	a, err1 := strconv.Atoi(parts[0])
	b, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return false
	}
	return a > major || (a == major && b >= minor)
}

// (e) Poison messages are dead-lettered with their reason and rejected
// without requeue, so that the queue's dead-letter exchange gets them too;
// the rest are applied.
func TestPoisonIsDeadLetteredAndRejected(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	dlx, dlq := h.deadLetterQueue()
	q := h.queue("e", amqp.Table{"x-dead-letter-exchange": dlx})
	good, good2 := inboxtest.NewID(), inboxtest.NewID()
	h.publish(q, good, event{N: 1})
	h.publish(q, inboxtest.NewID(), event{N: 2, Poison: "permanent"})
	h.publish(q, inboxtest.NewID(), event{N: 3, Poison: "retryable"})
	h.publish(q, "", event{N: 4})
	h.publish(q, "not-a-uuid", event{N: 5})
	h.publish(q, good2, event{N: 6})
	handler := inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
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
	cfg := h.config(q)
	cfg.MaxDeliveries = 2 // a classic queue: counted by the consumer
	r := h.start(cfg, handler, nil)

	var copies []amqp.Delivery
	eventually(t, "four copies in the dead-letter queue", func() bool {
		copies = append(copies, h.get(dlq, 10)...)
		return len(copies) >= 4
	})
	eventually(t, "the good ones applied", func() bool { return h.effectCount(good) == 1 && h.effectCount(good2) == 1 })
	r.stop()
	require.Equal(t, 0, h.ready(q), "nothing left in the queue")
	// Not Ordered: the batch split around the poison decides the order.
	require.Equal(t, []int{1, 6}, slices.Sorted(slices.Values(h.effectOrder())), "only the good ones applied")

	dls, err := h.client.ListDeadLetters(context.Background(), inbox.ListDeadLettersParams{Consumer: "billing", Limit: 100})
	require.NoError(t, err)
	reasons := map[int]string{}
	attempts := map[int]int{}
	for _, d := range dls {
		require.Equal(t, inboxrabbit.Transport, d.Transport)
		require.Equal(t, q, d.Queue)
		var e event
		require.NoError(t, json.Unmarshal(d.Payload, &e))
		reasons[e.N] = d.Reason
		attempts[e.N] = d.Attempts
	}
	require.Equal(t, map[int]string{
		2: inbox.ReasonPermanent,
		3: inbox.ReasonMaxAttempts,
		4: inbox.ReasonNoID,
		5: inbox.ReasonMalformedID,
	}, reasons)
	require.Equal(t, 2, attempts[3])
	var got []int
	for _, c := range copies {
		var e event
		require.NoError(t, json.Unmarshal(c.Body, &e))
		got = append(got, e.N)
	}
	require.Len(t, got, 4)
	for _, n := range []int{2, 3, 4, 5} {
		require.Contains(t, got, n)
	}
}

// (e) On a quorum queue the bound is the broker's x-delivery-count, which
// holds across consumers: a second process dead-letters a message on its
// first attempt when the first used up the others.
func TestQuorumDeliveryCountBoundsRedelivery(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	q := h.queue("e-quorum", amqp.Table{"x-queue-type": "quorum"})
	id := inboxtest.NewID()
	h.publish(q, id, event{N: 1, Poison: "retryable"})
	var calls atomic.Int32
	handler := inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
		calls.Add(1)
		return errors.New("downstream says no")
	})
	cfg := h.config(q)
	cfg.MaxDeliveries = 3
	cfg.RetryBackoff = 5 * time.Second // the first process holds its second failure
	first := h.start(cfg, handler, nil)
	eventually(t, "two failed deliveries", func() bool { return calls.Load() == 2 })
	first.stop() // requeued, counted a delivery by the broker

	cfg = h.config(q)
	cfg.MaxDeliveries = 3
	second := h.start(cfg, handler, nil)
	eventually(t, "the dead letter", func() bool {
		dls, err := h.client.ListDeadLetters(context.Background(), inbox.ListDeadLettersParams{Consumer: "billing", Limit: 10})
		require.NoError(t, err)
		return len(dls) == 1
	})
	second.stop()
	dls, err := h.client.ListDeadLetters(context.Background(), inbox.ListDeadLettersParams{Consumer: "billing", Limit: 10})
	require.NoError(t, err)
	require.Equal(t, inbox.ReasonMaxAttempts, dls[0].Reason)
	require.Equal(t, 3, dls[0].Attempts)
	require.Equal(t, int32(3), calls.Load(), "the second process tried it once")
	require.Equal(t, 0, h.ready(q))
}

// (f) Ordered, on a single-active-consumer queue, applies the queue in
// order: a retried delivery is requeued to the head and holds back the
// ones after it, a dead-lettered one lets them through, whatever the
// number of processes.
func TestOrderKeptWithSingleActiveConsumer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args amqp.Table
	}{
		{"classic", amqp.Table{"x-single-active-consumer": true}},
		{"quorum", amqp.Table{"x-single-active-consumer": true, "x-queue-type": "quorum"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			q := h.queue("f", tc.args)
			const n = 12
			ids := make([]string, n)
			for i := range n {
				ids[i] = inboxtest.NewID()
				e := event{N: i}
				if i == 8 {
					e.Poison = "permanent"
				}
				h.publish(q, ids[i], e)
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
			cfg := h.config(q)
			cfg.Ordered = true
			first := h.start(cfg, handler, nil)
			second := h.start(cfg, handler, nil) // a second process, standing by
			eventually(t, "the last event applied", func() bool { return h.effectCount(ids[n-1]) == 1 })
			first.stop()
			second.stop()
			require.True(t, failed.Load())
			require.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7, 9, 10, 11}, h.effectOrder())
			require.Equal(t, 0, h.ready(q))
		})
	}
}

// (g) The connection is cut while a batch's transaction is open: the
// batch commits, its acks are skipped (the channel is gone), the consumer
// dials again, and every event is applied exactly once and acknowledged.
func TestConnectionLossMidBatch(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	q := h.queue("g", nil)
	const n = 60
	ids := make([]string, n)
	for i := range n {
		ids[i] = inboxtest.NewID()
		h.publish(q, ids[i], event{N: i})
	}
	var calls atomic.Int32
	cut := make(chan struct{})
	cfg := h.config(q)
	cfg.Batch = 20
	// The first claim waits until the broker has handed the consumer
	// every message (its prefetch holds them all), so that the batches
	// after it hold many: one is cut mid-batch however slowly deliveries
	// trickle in under load, when each batch could otherwise hold one.
	var held, cutOnce sync.Once
	r := h.start(cfg, h.effectHandler(&calls), func(r *running, ctx context.Context) context.Context {
		return fault.WithHook(ctx, func(p fault.Point) {
			switch p {
			case fault.AfterClaim:
				held.Do(func() { h.waitHandedOut(q) })
			case fault.MidBatch:
				cutOnce.Do(func() {
					r.proxy.Cut()
					close(cut)
				})
			}
		})
	})
	waitClosed(t, "the connection to be cut mid-batch", cut)
	eventually(t, "every event applied", func() bool { return len(h.effectOrder()) >= n })
	// The cut may fall in the last batch, whose commit needs no broker:
	// every event is then applied before the consumer has dialled again.
	eventually(t, "the consumer dialled again", func() bool { return r.dials.Load() >= 2 })
	r.stop()

	// What the consumer left unacknowledged is back in the queue: each is
	// a delivery of an event already applied, and a skip.
	left, before := h.ready(q), h.total()
	var again atomic.Int32
	r = h.start(h.config(q), h.effectHandler(&again), nil)
	eventually(t, "the deliveries left over", func() bool { return h.total()-before >= left })
	r.stop()
	require.Equal(t, 0, h.ready(q), "every delivery was acked")
	require.Equal(t, int32(0), again.Load(), "every delivery left over was a skip")
	for i, id := range ids {
		require.Equal(t, 1, h.effectCount(id), "event %d", i)
	}
	require.Equal(t, n, len(h.effectOrder()))
}
