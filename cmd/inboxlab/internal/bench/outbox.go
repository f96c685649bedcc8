package bench

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/inbox/cmd/inboxlab/internal/broker"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/outbox"
)

// The outbox's part of the run: rows that enqueue events in the bare row's
// business transaction (outbox-enqueue-N), and a relay section that drains
// Config.OutboxEvents events to a null sink and to kfake, and times commit
// to publish.

// outboxPayload is every benchmark event's body.
var outboxPayload = []byte(`{"order_id":"0190c8e4-7b3a-7cc1-9f00-2b7c4e1d9a55","amount_cents":1250,"currency":"EUR"}`)

// outboxResource opens the outbox over the run's Postgres store.
var outboxResource = &resource{
	name: "outbox",
	open: func(ctx context.Context, b *bench) (func(), error) {
		d, ok := b.pg.client.Driver().(*inboxpgx.Driver)
		if !ok {
			return nil, fmt.Errorf("the store is not inboxpgx")
		}
		o, err := outbox.New(d, nil)
		if err != nil {
			return nil, err
		}
		b.outbox = o
		return nil, nil
	},
}

// outboxEnqueue returns the op of the outbox-enqueue-n row: the bare row's
// transaction with n events enqueued in it, keyed by account. The events
// go with the UPDATE, in one batch (Outbox.EnqueueBatch), so that the
// transaction keeps the bare row's three round trips: BEGIN, the UPDATE
// and the events, COMMIT. Compare its msgs/s, which counts business
// transactions, with bare's.
func outboxEnqueue(n int) func(ctx context.Context, b *bench, w *worker) error {
	return func(ctx context.Context, b *bench, w *worker) error {
		e := w.next(b, 1)[0]
		msgs := outboxMessages(e, n)
		tx, err := b.pool.Begin(ctx)
		if err != nil {
			return err
		}
		batch := &pgx.Batch{}
		batch.Queue(b.pg.update, e.amount, e.account)
		if _, err := b.outbox.EnqueueBatch(batch, msgs...); err != nil {
			rollback(ctx, tx)
			return err
		}
		if err := tx.SendBatch(ctx, batch).Close(); err != nil {
			rollback(ctx, tx)
			return err
		}
		return tx.Commit(ctx)
	}
}

// outboxEnqueueTx is the op of the outbox-enqueue-tx-1 row: outbox-enqueue-1
// with Outbox.EnqueueTx, whose INSERT is a round trip of its own after the
// UPDATE's.
func outboxEnqueueTx(ctx context.Context, b *bench, w *worker) error {
	e := w.next(b, 1)[0]
	msgs := outboxMessages(e, 1)
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, b.pg.update, e.amount, e.account); err != nil {
		rollback(ctx, tx)
		return err
	}
	if _, err := b.outbox.EnqueueTx(ctx, tx, msgs...); err != nil {
		rollback(ctx, tx)
		return err
	}
	return tx.Commit(ctx)
}

// outboxMessages are the n events of e's business transaction.
func outboxMessages(e *effect, n int) []outbox.Message {
	msgs := make([]outbox.Message, n)
	key := []byte("acct-" + strconv.Itoa(int(e.account)))
	for i := range msgs {
		msgs[i] = outbox.Message{Topic: "orders", Key: key, Payload: outboxPayload}
	}
	return msgs
}

// outboxRows reports whether the run has an outbox row.
func (b *bench) outboxRows() bool {
	for _, r := range b.rows {
		if needs(r, outboxResource) {
			return true
		}
	}
	return false
}

// OutboxResult is the relay section of the report.
type OutboxResult struct {
	// Events is how many events each drain publishes, Batch the relay's
	// batch size and Workers its batches in flight.
	Events  int `json:"events"`
	Batch   int `json:"batch"`
	Workers int `json:"workers"`
	// NullMsgsPerS is the drain rate to a sink that keeps nothing: claim
	// and delete, the store's share. KafkaMsgsPerS is to kfake, in this
	// process, with acks.
	NullMsgsPerS  float64 `json:"null_msgs_per_s"`
	KafkaMsgsPerS float64 `json:"kafka_msgs_per_s"`
	// LatencyP50Ms and LatencyP99Ms are from a producer's commit to the
	// sink's confirmation, one event at a time, the relay woken after the
	// commit (Outbox.Wake); LatencySamples is how many.
	LatencyP50Ms   float64 `json:"latency_p50_ms"`
	LatencyP99Ms   float64 `json:"latency_p99_ms"`
	LatencySamples int     `json:"latency_samples"`
	// ForwarderMsgsPerS is watermill-sql's Forwarder draining
	// ForwarderEvents events to the same kfake with the same kind of kgo
	// client, in the same run (forwarder.go).
	ForwarderMsgsPerS float64 `json:"forwarder_msgs_per_s"`
	ForwarderEvents   int     `json:"forwarder_events"`
	// Drains are the drains above as named rows, side by side:
	// relay-null, relay-kfake and watermill-sql-forwarder-kfake.
	Drains []Drain `json:"drains"`
}

// Drain is one drain of the relay section.
type Drain struct {
	Name     string  `json:"name"`
	Events   int     `json:"events"`
	MsgsPerS float64 `json:"msgs_per_s"`
	// RoundRates are the msgs/s of each round, in the order of the rounds,
	// for a drain that ran in rounds (the drain rows, relaydrain.go).
	RoundRates []float64 `json:"round_rates,omitempty"`
}

// outboxLatencySamples is how many events the latency measurement times.
const outboxLatencySamples = 500

// runOutbox measures the relay.
func (b *bench) runOutbox(ctx context.Context) (*OutboxResult, error) {
	if err := b.open(ctx, outboxResource); err != nil {
		return nil, err
	}
	res := &OutboxResult{Events: b.cfg.OutboxEvents, Batch: outbox.DefaultBatchSize, Workers: outbox.DefaultWorkers}
	// Start from an empty outbox: the enqueue rows leave theirs.
	if _, err := b.admin.Exec(ctx, `TRUNCATE `+b.table("outbox")); err != nil {
		return nil, fmt.Errorf("empty the outbox: %w", err)
	}
	b.logf("outbox: drain %d events to a null sink", res.Events)
	rate, err := b.drain(ctx, &outbox.MemorySink{Discard: true})
	if err != nil {
		return nil, err
	}
	res.NullMsgsPerS = rate

	b.logf("outbox: drain %d events to kfake", res.Events)
	k, sink, err := openKfakeSink(ctx)
	if err != nil {
		return nil, err
	}
	defer k.Close()
	if res.KafkaMsgsPerS, err = b.drain(ctx, sink); err != nil {
		return nil, err
	}

	res.ForwarderEvents = min(res.Events, forwarderEvents)
	b.logf("outbox: watermill-sql's Forwarder drains %d events to kfake", res.ForwarderEvents)
	producer, err := k.Client()
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	defer producer.Close()
	if res.ForwarderMsgsPerS, err = b.drainForwarder(ctx, producer, res.ForwarderEvents); err != nil {
		return nil, err
	}
	res.Drains = []Drain{
		{Name: "relay-null", Events: res.Events, MsgsPerS: res.NullMsgsPerS},
		{Name: "relay-kfake", Events: res.Events, MsgsPerS: res.KafkaMsgsPerS},
		{Name: "watermill-sql-forwarder-kfake", Events: res.ForwarderEvents, MsgsPerS: res.ForwarderMsgsPerS},
	}

	b.logf("outbox: commit-to-publish latency, %d events", outboxLatencySamples)
	lat, err := b.outboxLatency(ctx, sink)
	if err != nil {
		return nil, err
	}
	res.LatencySamples = len(lat)
	res.LatencyP50Ms = ms(lat[len(lat)/2])
	res.LatencyP99Ms = ms(lat[len(lat)*99/100])
	return res, nil
}

// openKfakeSink starts kfake in this process with the topic "orders" of
// four partitions, and returns it and an inboxkafka sink to that topic.
func openKfakeSink(ctx context.Context) (*broker.Kafka, outbox.Sink, error) {
	k, err := broker.OpenKafka("", broker.KafkaTimings{}, nil)
	if err != nil {
		return nil, nil, err
	}
	orders, err := k.NewTopic(ctx, "orders", &broker.TopicConfig{Partitions: 4})
	if err != nil {
		k.Close()
		return nil, nil, err
	}
	sink, err := orders.OutboxSink()
	if err != nil {
		k.Close()
		return nil, nil, err
	}
	return k, sink, nil
}

// drain enqueues Config.OutboxEvents events, a thousand to a transaction,
// then times a running relay until sink confirmed every one.
func (b *bench) drain(ctx context.Context, sink outbox.Sink) (float64, error) {
	n := b.cfg.OutboxEvents
	for i := 0; i < n; i += 1000 {
		msgs := make([]outbox.Message, min(1000, n-i))
		for j := range msgs {
			msgs[j] = outbox.Message{Topic: "orders", Key: []byte("acct-" + strconv.Itoa((i+j)%b.cfg.Accounts)), Payload: outboxPayload}
		}
		if _, err := b.outbox.Enqueue(ctx, msgs...); err != nil {
			return 0, err
		}
	}
	return timeDrain(ctx, b.outbox, newCountSink(sink, n))
}

// timeDrain times a relay of o, with the default configuration, from its
// start until counted saw its events confirmed.
func timeDrain(ctx context.Context, o *outbox.Outbox[pgx.Tx], counted *countSink) (float64, error) {
	n := counted.want
	r, err := o.NewRelay(counted, nil)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	rctx, cancel := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- r.Run(rctx) }()
	defer func() { cancel(); <-ran }()
	select {
	case <-counted.done:
	case <-time.After(10 * time.Minute):
		return 0, fmt.Errorf("the relay published %d of %d events in 10 minutes", counted.n.Load(), n)
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// outboxLatency times commit to confirmation, one event at a time.
func (b *bench) outboxLatency(ctx context.Context, sink outbox.Sink) ([]time.Duration, error) {
	seen := &signalSink{sink: sink, seen: make(chan string, 1)}
	r, err := b.outbox.NewRelay(seen, nil)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- r.Run(rctx) }()
	defer func() { cancel(); <-ran }()
	lat := make([]time.Duration, 0, outboxLatencySamples)
	for range outboxLatencySamples {
		tx, err := b.pool.Begin(ctx)
		if err != nil {
			return nil, err
		}
		ids, err := b.outbox.EnqueueTx(ctx, tx, outbox.Message{Topic: "orders", Payload: outboxPayload})
		if err != nil {
			rollback(ctx, tx)
			return nil, err
		}
		if err := tx.Commit(ctx); err != nil {
			return nil, err
		}
		committed := time.Now()
		b.outbox.Wake()
		select {
		case id := <-seen.seen:
			if id != ids[0] {
				return nil, fmt.Errorf("published %s, want %s", id, ids[0])
			}
		case <-time.After(30 * time.Second):
			return nil, fmt.Errorf("event %s not published within 30s", ids[0])
		}
		lat = append(lat, time.Since(committed))
	}
	slices.Sort(lat)
	return lat, nil
}

// countSink counts what sink confirmed and closes done at want.
type countSink struct {
	sink outbox.Sink
	n    atomic.Int64
	// ordered counts the confirmed records that carry a key sequence
	// number, calls the calls of Publish.
	ordered, calls atomic.Int64
	want           int64
	once           sync.Once
	done           chan struct{}
}

func newCountSink(sink outbox.Sink, want int) *countSink {
	return &countSink{sink: sink, want: int64(want), done: make(chan struct{})}
}

func (s *countSink) Publish(ctx context.Context, recs []outbox.Record) []error {
	s.calls.Add(1)
	errs := s.sink.Publish(ctx, recs)
	var ok, ordered int64
	for i, err := range errs {
		if err == nil {
			ok++
			if recs[i].KeySeq > 0 {
				ordered++
			}
		}
	}
	s.ordered.Add(ordered)
	if s.n.Add(ok) >= s.want {
		s.once.Do(func() { close(s.done) })
	}
	return errs
}

// KeepsKeyOrder implements outbox.KeyOrderSink: the count passes on the
// capability of the sink it counts, so that the relay treats both alike.
func (s *countSink) KeepsKeyOrder() bool { return keepsKeyOrder(s.sink) }

// keepsKeyOrder reports whether sink keeps a key's order within one call
// (outbox.KeyOrderSink).
func keepsKeyOrder(sink outbox.Sink) bool {
	ks, ok := sink.(outbox.KeyOrderSink)
	return ok && ks.KeepsKeyOrder()
}

// signalSink passes on the id of each record sink confirmed.
type signalSink struct {
	sink outbox.Sink
	seen chan string
}

func (s *signalSink) Publish(ctx context.Context, recs []outbox.Record) []error {
	errs := s.sink.Publish(ctx, recs)
	for i, err := range errs {
		if err == nil {
			s.seen <- recs[i].ID
		}
	}
	return errs
}

// KeepsKeyOrder implements outbox.KeyOrderSink, as the sink it wraps does.
func (s *signalSink) KeepsKeyOrder() bool { return keepsKeyOrder(s.sink) }
