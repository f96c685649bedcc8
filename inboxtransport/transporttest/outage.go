package transporttest

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxtransport"
	"github.com/txinbox/inbox/internal/outagetest"
	"github.com/txinbox/inbox/outbox"
)

// outageDeliveries is the MaxDeliveries of the outage matrix.
const outageDeliveries = 3

// The outage matrix (package outagetest): 2,000 messages, one of them
// poison, through a consumer that logs in as a role of its own, while the
// database fails in one way per case: sessions terminated, the inbox
// locked, CONNECT revoked, INSERT revoked, read-only. Each case ends with
// every healthy message applied exactly once, none dead-lettered, the
// poison message dead-lettered after exactly MaxDeliveries attempts, every
// message acknowledged, and the outage logged once. The cases run one
// after another, each reporting its CPU while the consumer is paused.
func testOutage[TTx any](t *testing.T, tr Transport[TTx]) {
	db := outagetest.NewDB(t)
	for _, c := range outagetest.Cases {
		t.Run(c.Name, func(t *testing.T) { runOutage(t, tr, db, c) })
	}
}

func runOutage[TTx any](t *testing.T, tr Transport[TTx], db *outagetest.DB, oc outagetest.Case) {
	ctx := context.Background()
	s := outagetest.NewStore(t, db, `CREATE TABLE %s (event_id uuid NOT NULL)`)
	client, closeClient, err := tr.Client(ctx, s.URL, s.Tables, s.Config())
	require.NoError(t, err)
	t.Cleanup(closeClient)
	q := tr.NewQueue(t, QueueOptions{})

	// The stream: a first half before the fault, and a second half, with
	// the poison message in its middle, published once the fault has
	// begun.
	var healthy []string
	var poison string
	msgs := make([]Message, outagetest.Events)
	for i := range msgs {
		id := newID()
		e := event{N: i}
		if i == outagetest.Events*3/4 {
			e.Fail, poison = "poison", id
		} else {
			healthy = append(healthy, id)
		}
		msgs[i] = msg(id, e)
	}
	publish := func(msgs []Message) {
		pctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		require.NoError(t, q.Publish(pctx, msgs...))
	}
	publish(msgs[:outagetest.Events/2])

	var poisonTries atomic.Int64
	h := inbox.HandlerFunc[TTx](func(ctx context.Context, tx TTx, m inbox.Message) error {
		var e event
		if err := json.Unmarshal(m.Payload, &e); err != nil {
			return inbox.Permanent(err)
		}
		if e.Fail != "" {
			poisonTries.Add(1)
			return oc.Poison
		}
		return tr.Exec(ctx, tx, `INSERT INTO `+s.Effects+` (event_id) VALUES ($1)`, m.ID)
	})
	c, err := q.Consumer(ConsumerOptions[TTx]{
		Client:   client,
		Handler:  h,
		Consumer: ConsumerName,
		Key:      inbox.HeaderKey(outbox.HeaderEventID),
		Settings: inboxtransport.Settings{
			Workers:         4,
			MaxBatch:        50,
			MaxDeliveries:   outageDeliveries,
			RetryBackoff:    time.Second,
			MaxRetryBackoff: 2 * time.Second,
			ShutdownTimeout: 10 * time.Second,
			ReplayInterval:  -1,
			Logger:          s.Logger(),
		},
	})
	require.NoError(t, err)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(wait):
			t.Errorf("Run did not return within %v of its context's cancellation", wait)
		}
	}
	t.Cleanup(stop)

	s.WaitApplied(t, outagetest.Events/2)
	s.Fault(t, oc, func() { publish(msgs[outagetest.Events/2:]) })
	s.WaitApplied(t, len(healthy))
	outagetest.Eventually(t, "the poison message dead-lettered", func() (bool, error) {
		n, err := s.DeadLetters()
		return n > 0, err
	})
	outagetest.Eventually(t, "every message acknowledged", func() (bool, error) {
		n, err := q.Depth(ctx)
		return n == 0, err
	})
	stop()
	n, err := q.Depth(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "messages left unacknowledged at the broker")

	s.RequireOutcome(t, oc, healthy, poison, outageDeliveries)
	// A try whose connection the fault broke is not an attempt.
	require.GreaterOrEqual(t, poisonTries.Load(), int64(outageDeliveries))
}
