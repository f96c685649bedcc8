package inboxkafka_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxkafka"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/internal/fault"
	"github.com/txinbox/inbox/outbox"
	"github.com/txinbox/inbox/outbox/outboxtest"
)

// relayCrash is the panic with which a test's relay "dies" at a fault
// point: nothing after it runs, as if the process had been killed.
type relayCrash struct{}

// TestOutboxEndToEnd runs the whole chain on kfake: business transactions
// that write an order and enqueue its event (some rolled back), a relay
// that dies after Kafka confirmed its first batch and before it deleted the
// rows, a second relay that publishes those again when the lease ends, with
// the same event ids, and a consumer whose inbox skips the republished
// copies. Every committed order is applied exactly once, no rolled-back
// one ever, and each key's events arrive in the order of their commits.
func TestOutboxEndToEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t, protocolNamed("classic"), envOpts{partitions: 3})
	ctx := context.Background()
	d := e.client.Driver().(*inboxpgx.Driver)
	o, err := outbox.New(d, &outbox.Config{Ordered: true})
	require.NoError(t, err)
	orders := pgx.Identifier{e.schema, "orders"}.Sanitize()
	_, err = e.pool.Exec(ctx, `CREATE TABLE `+orders+` (id uuid PRIMARY KEY, key text NOT NULL)`)
	require.NoError(t, err)

	const n, keys = 60, 6
	var committed []string
	seq := map[int]int{}
	for i := range n + 10 {
		k := i % keys
		tx, err := e.pool.Begin(ctx)
		require.NoError(t, err)
		ids, err := o.EnqueueTx(ctx, tx, outbox.Message{
			Topic: e.topic, Key: []byte("k" + strconv.Itoa(k)), Payload: []byte(`{}`),
			Headers: map[string]string{"n": strconv.Itoa(seq[k] + 1)},
		})
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `INSERT INTO `+orders+` (id, key) VALUES ($1, $2)`, ids[0], "k"+strconv.Itoa(k))
		require.NoError(t, err)
		if i%7 == 3 { // ten business transactions roll back
			require.NoError(t, tx.Rollback(ctx))
			continue
		}
		require.NoError(t, tx.Commit(ctx))
		seq[k]++
		committed = append(committed, ids[0])
	}
	require.Len(t, committed, n)

	producer, err := kgo.NewClient(kgo.SeedBrokers(e.seeds...))
	require.NoError(t, err)
	t.Cleanup(producer.Close)
	sink := inboxkafka.NewOutboxSink(producer)

	// The first relay dies after Kafka confirmed its batch.
	first, err := o.NewRelay(sink, &outbox.RelayConfig{BatchSize: 25})
	require.NoError(t, err)
	crashCtx := fault.WithHook(ctx, func(p fault.Point) {
		if p == fault.RelayAfterPublish {
			panic(relayCrash{})
		}
	})
	func() {
		defer func() {
			if r := recover(); r != (relayCrash{}) {
				t.Fatalf("the relay did not reach its fault point: %v", r)
			}
		}()
		_, _ = first.RelayOnce(crashCtx)
	}()
	st, err := e.client.Admin().OutboxStats(ctx)
	require.NoError(t, err)
	require.EqualValues(t, n, st.Pending, "the dead relay deleted nothing")

	// The second relay takes over when the lease has run out.
	second, err := o.NewRelay(sink, &outbox.RelayConfig{Now: func() time.Time { return time.Now().Add(outbox.DefaultLease + time.Minute) }})
	require.NoError(t, err)
	republished := 0
	for range n {
		res, err := second.RelayOnce(ctx)
		require.NoError(t, err)
		require.Zero(t, res.Rejected)
		if res.Claimed == 0 {
			break
		}
		republished += res.Published
	}
	require.Equal(t, n, republished)
	st, err = e.client.Admin().OutboxStats(ctx)
	require.NoError(t, err)
	require.Zero(t, st.Pending)

	var tl tally
	cfg := consumerConfig()
	cfg.Key = inbox.HeaderKey(outbox.HeaderEventID)
	cfg.OnResult = tl.observe
	r := e.start("a", cfg, e.handler())
	waitFor(t, 2*time.Minute, "every copy processed", func() (bool, error) {
		return tl.processed() >= int64(n+25), nil
	})
	e.waitCommittedToEnd(time.Minute)
	r.stop(t)

	e.requireExactlyOnce(committed)
	require.EqualValues(t, n, tl.applied.Load())
	require.EqualValues(t, 25, tl.duplicates.Load(), "the dead relay's batch came again, and was skipped")
	// Every effect has its committed order; each key's effects were applied
	// in the order of their commits.
	var orphans int
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT count(*) FROM `+e.effects+` f WHERE NOT EXISTS (SELECT FROM `+orders+` o WHERE o.id = f.event_id)`).Scan(&orphans))
	require.Zero(t, orphans)
	rows, err := e.pool.Query(ctx, `SELECT key, n FROM `+e.effects+` ORDER BY seq`)
	require.NoError(t, err)
	defer rows.Close()
	last := map[string]int{}
	for rows.Next() {
		var key string
		var got int
		require.NoError(t, rows.Scan(&key, &got))
		require.Equal(t, last[key]+1, got, "key %s out of order", key)
		last[key] = got
	}
	require.NoError(t, rows.Err())
}

// The sink tells a record the broker rejects from a broker it cannot
// reach.
func TestOutboxSinkClassifiesErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t, protocolNamed("classic"), envOpts{partitions: 1})
	ctx := context.Background()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.seeds...), kgo.ProducerBatchMaxBytes(1000))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	errs := inboxkafka.NewOutboxSink(cl).Publish(ctx, []outbox.Record{
		{ID: "a", Topic: e.topic, Payload: []byte("fits"), Headers: map[string]string{outbox.HeaderEventID: "a"}},
		{ID: "b", Topic: e.topic, Payload: make([]byte, 5000), Headers: map[string]string{outbox.HeaderEventID: "b"}},
	})
	require.NoError(t, errs[0])
	require.Error(t, errs[1])
	require.True(t, errors.Is(errs[1], kerr.MessageTooLarge), "got %v", errs[1])
	require.False(t, outbox.IsUnavailable(errs[1]), "a record too large is rejected")

	// A broker that is not there.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	down, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RecordDeliveryTimeout(time.Second))
	require.NoError(t, err)
	t.Cleanup(down.Close)
	errs = inboxkafka.NewOutboxSink(down).Publish(ctx, []outbox.Record{{ID: "c", Topic: e.topic}})
	require.Error(t, errs[0])
	require.True(t, outbox.IsUnavailable(errs[0]), "an unreachable broker is unavailable: %v", errs[0])
}

// The Kafka sink is not an outbox.KeyOrderSink: kgo fails a record too
// large for a batch on its own before buffering it, and goes on with the
// next record of the same key and partition, so a key's run in one call
// could reach Kafka with a gap. (A fatal error on a batch the broker
// answers likewise lets the key's records buffered after it through, under
// a new producer epoch.) The relay therefore gives it one record per key
// per call.
func TestOutboxSinkDoesNotStopAKeyAfterAFailure(t *testing.T) {
	t.Parallel()
	e := newEnv(t, protocolNamed("classic"), envOpts{partitions: 1})
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.seeds...), kgo.ProducerBatchMaxBytes(1000))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	sink := inboxkafka.NewOutboxSink(cl)
	_, declares := any(sink).(outbox.KeyOrderSink)
	require.False(t, declares, "the Kafka sink must not declare that it keeps a key's order within a call")
	key := []byte("k")
	rec := func(id string, payload []byte, seq int64) outbox.Record {
		return outbox.Record{ID: id, Topic: e.topic, Key: key, KeySeq: seq, Payload: payload, Headers: map[string]string{outbox.HeaderEventID: id}}
	}
	errs := sink.Publish(context.Background(), []outbox.Record{rec("a1", []byte("1"), 1), rec("a2", make([]byte, 5000), 2), rec("a3", []byte("3"), 3)})
	require.NoError(t, errs[0])
	require.True(t, errors.Is(errs[1], kerr.MessageTooLarge), "got %v", errs[1])
	require.NoError(t, errs[2], "kgo published the key's record after the failed one")
}

// The sink conformance suite on kfake: a topic of its own, read back by a
// consumer, and the producing client closed for the broker's
// unavailability.
func TestOutboxSinkConformance(t *testing.T) {
	t.Parallel()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "outbox"))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	producer, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...))
	require.NoError(t, err)
	consumer, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ConsumeTopics("outbox"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(consumer.Close)
	outboxtest.Run(t, outboxtest.Harness{
		Sink:  inboxkafka.NewOutboxSink(producer),
		Topic: "outbox",
		Receive: func(ctx context.Context) ([]outboxtest.Received, error) {
			var out []outboxtest.Received
			fetches := consumer.PollFetches(ctx)
			fetches.EachRecord(func(r *kgo.Record) {
				m := outboxtest.Received{Headers: map[string]string{}, Payload: r.Value}
				for _, h := range r.Headers {
					m.Headers[h.Key] = string(h.Value)
				}
				out = append(out, m)
			})
			return out, fetches.Err()
		},
		Break: func(*testing.T) { producer.Close() },
	})
}
