package inboxpgx_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/inboxtype"
	"github.com/txinbox/inbox/outbox"
)

// runRelay runs r until the test ends.
func runRelay(t *testing.T, r *outbox.Relay) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
}

// waitUntil polls cond with a deadline.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// A relay that polls once an hour still publishes at once what its
// Outbox enqueued: Enqueue wakes it after its commit, and EnqueueTx wakes
// it before the caller's commit, after which it looks again.
func TestRelayRunIsWokenByEnqueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, _ := newDriver(t, inboxdriver.Tables{})
	o, err := outbox.New(d, nil)
	require.NoError(t, err)
	sink := &outbox.MemorySink{}
	r, err := o.NewRelay(sink, &outbox.RelayConfig{PollInterval: time.Hour})
	require.NoError(t, err)
	runRelay(t, r)

	_, err = o.Enqueue(ctx, outbox.Message{Topic: "orders"})
	require.NoError(t, err)
	waitUntil(t, "the enqueued event published", func() bool { return sink.Confirmed() == 1 })

	tx, err := d.Pool().Begin(ctx)
	require.NoError(t, err)
	_, err = o.EnqueueTx(ctx, tx, outbox.Message{Topic: "orders"})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	waitUntil(t, "the event enqueued in the caller's transaction published", func() bool { return sink.Confirmed() == 2 })
}

// While the broker is unreachable a running relay pauses, with backoff,
// and parks nothing; when it is back the events go out.
func TestRelayRunWaitsOutAnUnreachableBroker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, _ := newDriver(t, inboxdriver.Tables{})
	o, err := outbox.New(d, nil)
	require.NoError(t, err)
	var down atomic.Bool
	down.Store(true)
	var refused atomic.Int64
	sink := &outbox.MemorySink{Reject: func(outbox.Record) error {
		if down.Load() {
			refused.Add(1)
			return outbox.Unavailable(errors.New("connection refused"))
		}
		return nil
	}}
	r, err := o.NewRelay(sink, &outbox.RelayConfig{PollInterval: 5 * time.Millisecond, UnavailableBackoff: time.Millisecond, MaxRejections: 1})
	require.NoError(t, err)
	_, err = o.Enqueue(ctx, outbox.Message{Topic: "orders"}, outbox.Message{Topic: "orders"})
	require.NoError(t, err)
	runRelay(t, r)
	waitUntil(t, "many refused publishes", func() bool { return refused.Load() >= 20 })
	st, err := outboxStats(t, d)
	require.NoError(t, err)
	require.EqualValues(t, 2, st.Pending)
	require.Zero(t, st.Parked, "an unreachable broker parks nothing, whatever MaxRejections")
	down.Store(false)
	waitUntil(t, "the events published", func() bool { return sink.Confirmed() == 2 })
	waitUntil(t, "the rows deleted", func() bool {
		st, err := outboxStats(t, d)
		require.NoError(t, err)
		return st.Pending == 0
	})
}

// observer records what a relay reported.
type observer struct {
	claims, published, rejected atomic.Int64
	parked                      chan *outbox.ParkEvent
}

func (o *observer) Claimed(_ context.Context, e *outbox.ClaimEvent) { o.claims.Add(int64(e.Rows)) }
func (o *observer) Published(_ context.Context, e *outbox.PublishEvent) {
	o.published.Add(int64(e.Confirmed))
	o.rejected.Add(int64(e.Rejected))
}
func (o *observer) Parked(_ context.Context, e *outbox.ParkEvent) { o.parked <- e }

// The relay tells its Observer about claims, publishes and parked events.
func TestRelayObserver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, _ := newDriver(t, inboxdriver.Tables{})
	o, err := outbox.New(d, nil)
	require.NoError(t, err)
	ids, err := o.Enqueue(ctx, outbox.Message{Topic: "orders"}, outbox.Message{Topic: "bad"})
	require.NoError(t, err)
	obs := &observer{parked: make(chan *outbox.ParkEvent, 1)}
	sink := &outbox.MemorySink{Reject: func(r outbox.Record) error {
		if r.Topic == "bad" {
			return errors.New("INVALID_TOPIC_EXCEPTION")
		}
		return nil
	}}
	r, err := o.NewRelay(sink, &outbox.RelayConfig{Observer: obs, MaxRejections: 1})
	require.NoError(t, err)
	res, err := r.RelayOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Parked)
	require.EqualValues(t, 2, obs.claims.Load())
	require.EqualValues(t, 1, obs.published.Load())
	require.EqualValues(t, 1, obs.rejected.Load())
	p := <-obs.parked
	require.Equal(t, ids[1], p.ID)
	require.Equal(t, "bad", p.Topic)
	require.Equal(t, 1, p.Rejections)
	require.ErrorContains(t, p.Err, "INVALID_TOPIC_EXCEPTION")
}

// outboxStats reads the outbox of d, as inbox.Admin.OutboxStats does.
func outboxStats(t *testing.T, d *inboxpgx.Driver) (*inboxtype.OutboxStats, error) {
	t.Helper()
	a, err := inbox.NewAdmin(d, nil)
	require.NoError(t, err)
	return a.OutboxStats(context.Background())
}
