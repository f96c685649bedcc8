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

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxrabbit"
	"github.com/txinbox/inbox/inboxtest"
	"github.com/txinbox/inbox/inboxtype"
	"github.com/txinbox/inbox/internal/fault"
)

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
		_, err := h.fx.ApplyEvent(ctx, tx, msg)
		return err
	})
	r := h.start(h.config(q), handler, nil)
	eventually(t, "the redelivery", func() bool { return h.delivered(id) >= 2 })
	r.stop()
	require.Equal(t, 0, h.ready(q))
	require.GreaterOrEqual(t, r.dials.Load(), int32(2), "the consumer reconnected")
	require.Equal(t, int32(1), calls.Load(), "the redelivery was skipped")
	require.Equal(t, 1, h.fx.Count(h.t, id))
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
	handler := h.fx.Handler(new(atomic.Int32))
	cfg := h.config(q)
	cfg.MaxDeliveries = 2 // a classic queue: counted by the consumer
	r := h.start(cfg, handler, nil)

	var copies []amqp.Delivery
	eventually(t, "four copies in the dead-letter queue", func() bool {
		copies = append(copies, h.get(dlq, 10)...)
		return len(copies) >= 4
	})
	eventually(t, "the good ones applied", func() bool { return h.fx.Count(h.t, good) == 1 && h.fx.Count(h.t, good2) == 1 })
	r.stop()
	require.Equal(t, 0, h.ready(q), "nothing left in the queue")
	// Not Ordered: the batch split around the poison decides the order.
	require.Equal(t, []int{1, 6}, slices.Sorted(slices.Values(h.fx.Order(t, ""))), "only the good ones applied")

	dls, err := h.client.Admin().DeadLetterList(context.Background(), inboxtype.DeadLetterListParams{Consumer: "billing", Limit: 100})
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
		dls, err := h.client.Admin().DeadLetterList(context.Background(), inboxtype.DeadLetterListParams{Consumer: "billing", Limit: 10})
		require.NoError(t, err)
		return len(dls) == 1
	})
	second.stop()
	dls, err := h.client.Admin().DeadLetterList(context.Background(), inboxtype.DeadLetterListParams{Consumer: "billing", Limit: 10})
	require.NoError(t, err)
	require.Equal(t, inbox.ReasonMaxAttempts, dls[0].Reason)
	require.Equal(t, 3, dls[0].Attempts)
	require.Equal(t, int32(3), calls.Load(), "the second process tried it once")
	require.Equal(t, 0, h.ready(q))
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
	cfg.MaxBatch = 20
	// The first claim waits until the broker has handed the consumer
	// every message (its prefetch holds them all), so that the batches
	// after it hold many: one is cut mid-batch however slowly deliveries
	// trickle in under load, when each batch could otherwise hold one.
	var held, cutOnce sync.Once
	r := h.start(cfg, h.fx.Handler(&calls), func(r *running, ctx context.Context) context.Context {
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
	eventually(t, "every event applied", func() bool { return len(h.fx.Order(t, "")) >= n })
	// The cut may fall in the last batch, whose commit needs no broker:
	// every event is then applied before the consumer has dialled again.
	eventually(t, "the consumer dialled again", func() bool { return r.dials.Load() >= 2 })
	r.stop()

	// What the consumer left unacknowledged is back in the queue: each is
	// a delivery of an event already applied, and a skip.
	left, before := h.ready(q), h.total()
	var again atomic.Int32
	r = h.start(h.config(q), h.fx.Handler(&again), nil)
	eventually(t, "the deliveries left over", func() bool { return h.total()-before >= left })
	r.stop()
	require.Equal(t, 0, h.ready(q), "every delivery was acked")
	require.Equal(t, int32(0), again.Load(), "every delivery left over was a skip")
	for i, id := range ids {
		require.Equal(t, 1, h.fx.Count(h.t, id), "event %d", i)
	}
	require.Equal(t, n, len(h.fx.Order(t, "")))
}
