package inboxrabbit_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/inboxrabbit"
	"github.com/txinbox/inbox/internal/outagetest"
	"github.com/txinbox/inbox/internal/require"
	"github.com/txinbox/inbox/internal/uuid"
)

// The outage matrix on inboxrabbit (see package outagetest): 2,000
// messages, one of them poison, on a quorum queue of the machine's
// RabbitMQ, through a consumer that logs in as a role of its own, while
// the database fails in one way per case. The quorum queue counts every
// delivery in x-delivery-count; the deliveries the outage cost are no
// attempts, so the poison message is dead-lettered after exactly
// MaxDeliveries attempts.
const outageDeliveries = 3

// TestOutage runs the outage matrix on inboxrabbit, one case after another
// (each case reports its own CPU).
func TestOutage(t *testing.T) {
	db := outagetest.NewDB(t)
	t.Run("rabbitmq", func(t *testing.T) {
		for _, c := range outagetest.Cases {
			t.Run(c.Name, func(t *testing.T) { runRabbitOutage(t, db, c) })
		}
	})
}

func runRabbitOutage(t *testing.T, db *outagetest.DB, oc outagetest.Case) {
	ctx := context.Background()
	s := outagetest.NewStore(t, db, `CREATE TABLE %s (event_id uuid NOT NULL)`)
	rolePool, err := pgxpool.New(ctx, s.URL+"&pool_max_conns=4")
	require.NoError(t, err)
	t.Cleanup(rolePool.Close)
	d, err := inboxpgx.New(rolePool, &inboxpgx.Config{Tables: s.Tables})
	require.NoError(t, err)
	h := newHarness(t)
	h.client, err = inbox.NewClient(d, s.Config())
	require.NoError(t, err)
	q := h.queue("outage", amqp.Table{"x-queue-type": "quorum"})

	// The stream: a first half before the fault, and a second half, with
	// the poison message in its middle, published once the fault has
	// begun.
	var healthy []string
	var poison string
	pubs := make([]amqp.Publishing, outagetest.Events)
	for i := range pubs {
		e := event{N: i}
		id := uuid.V4()
		if i == outagetest.Events*3/4 {
			e.Poison = "yes"
			poison = id
		} else {
			healthy = append(healthy, id)
		}
		body, err := json.Marshal(e)
		require.NoError(t, err)
		pubs[i] = amqp.Publishing{Body: body, DeliveryMode: amqp.Persistent, Headers: amqp.Table{inboxrabbit.HeaderEventID: id}}
	}
	publish := func(pubs []amqp.Publishing) {
		ch, err := h.admin.Channel()
		require.NoError(t, err)
		defer ch.Close()
		require.NoError(t, ch.Confirm(false))
		confs := make([]*amqp.DeferredConfirmation, len(pubs))
		for i, p := range pubs {
			confs[i], err = ch.PublishWithDeferredConfirmWithContext(ctx, "", q, true, false, p)
			require.NoError(t, err)
		}
		wctx, cancel := context.WithTimeout(ctx, waitDeadline)
		defer cancel()
		for _, c := range confs {
			ok, err := c.WaitContext(wctx)
			require.NoError(t, err)
			require.True(t, ok, "the broker confirmed the publish")
		}
	}
	publish(pubs[:outagetest.Events/2])

	var poisonTries atomic.Int64
	handler := inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
		var e event
		if err := json.Unmarshal(msg.Payload, &e); err != nil {
			return inbox.Permanent(err)
		}
		if e.Poison != "" {
			poisonTries.Add(1)
			return oc.Poison
		}
		_, err := tx.Exec(ctx, `INSERT INTO `+s.Effects+` (event_id) VALUES ($1)`, msg.ID)
		return err
	})
	cfg := h.config(q)
	cfg.Key = inbox.HeaderKey(inboxrabbit.HeaderEventID)
	cfg.Workers = 4
	cfg.MaxDeliveries = outageDeliveries
	cfg.RetryBackoff = time.Second
	cfg.MaxRetryBackoff = 2 * time.Second
	cfg.Logger = s.Logger()
	r := h.start(cfg, handler, nil)

	s.WaitApplied(t, outagetest.Events/2)
	s.Fault(t, oc, func() { publish(pubs[outagetest.Events/2:]) })
	s.WaitApplied(t, len(healthy))
	outagetest.Eventually(t, "the poison message dead-lettered", func() (bool, error) {
		n, err := s.DeadLetters()
		return n > 0, err
	})
	r.stop()
	require.Zero(t, h.ready(q), "every message acked or rejected")

	s.RequireOutcome(t, oc, healthy, poison, outageDeliveries)
	// A try whose connection the fault broke is not an attempt.
	require.GreaterOrEqual(t, poisonTries.Load(), int64(outageDeliveries))
}
