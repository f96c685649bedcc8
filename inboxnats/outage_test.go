package inboxnats_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxnats"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/internal/outagetest"
	"github.com/txinbox/inbox/internal/require"
	"github.com/txinbox/inbox/internal/uuid"
)

// The outage matrix on inboxnats (see package outagetest): 2,000 messages,
// one of them poison, on a stream of the machine's JetStream server,
// through a consumer that logs in as a role of its own, while the database
// fails in one way per case. JetStream counts every delivery in
// NumDelivered; the deliveries the outage cost are no attempts, so the
// poison message is dead-lettered after exactly MaxDeliver attempts.
const outageDeliveries = 3

// TestOutage runs the outage matrix on inboxnats, one case after another
// (each case reports its own CPU).
func TestOutage(t *testing.T) {
	db := outagetest.NewDB(t)
	srv := machineServer(t)
	t.Run("nats", func(t *testing.T) {
		for _, c := range outagetest.Cases {
			t.Run(c.Name, func(t *testing.T) { runNATSOutage(t, db, srv, c) })
		}
	})
}

func runNATSOutage(t *testing.T, db *outagetest.DB, srv *natsServer, oc outagetest.Case) {
	ctx := context.Background()
	s := outagetest.NewStore(t, db, `CREATE TABLE %s (event_id uuid NOT NULL)`)
	rolePool, err := pgxpool.New(ctx, s.URL+"&pool_max_conns=4")
	require.NoError(t, err)
	t.Cleanup(rolePool.Close)
	d, err := inboxpgx.New(rolePool, &inboxpgx.Config{Tables: s.Tables})
	require.NoError(t, err)
	h := newHarness(t, srv)
	h.client, err = inbox.NewClient(d, s.Config())
	require.NoError(t, err)
	durable := h.durable(nil)

	// The stream: a first half before the fault, and a second half, with
	// the poison message in its middle, published once the fault has
	// begun.
	var healthy []string
	var poison string
	msgs := make([]*nats.Msg, outagetest.Events)
	for i := range msgs {
		e := event{N: i}
		id := uuid.V4()
		if i == outagetest.Events*3/4 {
			e.Poison = "yes"
			poison = id
		} else {
			healthy = append(healthy, id)
		}
		data, err := json.Marshal(e)
		require.NoError(t, err)
		msgs[i] = nats.NewMsg(h.subject + ".events")
		msgs[i].Data = data
		msgs[i].Header.Set(inboxnats.HeaderEventID, id)
	}
	publish := func(msgs []*nats.Msg) {
		for _, m := range msgs {
			_, err := h.js.PublishMsgAsync(m)
			require.NoError(t, err)
		}
		select {
		case <-h.js.PublishAsyncComplete():
		case <-time.After(waitDeadline):
			t.Fatalf("the server did not acknowledge the publishes within %v", waitDeadline)
		}
	}
	publish(msgs[:outagetest.Events/2])

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
	cfg := h.config(durable)
	cfg.Workers = 4
	cfg.MaxDeliver = outageDeliveries
	cfg.RetryBackoff = time.Second
	cfg.MaxRetryBackoff = 2 * time.Second
	cfg.Logger = s.Logger()
	r := h.start(cfg, handler, nil)

	s.WaitApplied(t, outagetest.Events/2)
	s.Fault(t, oc, func() { publish(msgs[outagetest.Events/2:]) })
	s.WaitApplied(t, len(healthy))
	outagetest.Eventually(t, "the poison message dead-lettered", func() (bool, error) {
		n, err := s.DeadLetters()
		return n > 0, err
	})
	outagetest.Eventually(t, "every message acked or terminated", func() (bool, error) {
		info := h.info(durable)
		return info.NumPending == 0 && info.NumAckPending == 0 && info.NumRedelivered == 0, nil
	})
	require.NoError(t, r.stop())

	s.RequireOutcome(t, oc, healthy, poison, outageDeliveries)
	// A try whose connection the fault broke is not an attempt.
	require.GreaterOrEqual(t, poisonTries.Load(), int64(outageDeliveries))
}
