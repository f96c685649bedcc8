package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txinbox/inbox/cmd/inboxlab/internal/broker"
	"github.com/txinbox/inbox/inboxkafka"
	"github.com/txinbox/inbox/inboxtransport"
)

// kafkaStore is the Kafka side of the kafka-inbox-batch-100 and
// kafka-bare-ack rows: kfake in this process, a topic with a partition per
// worker for each row, one inboxkafka consumer over the Postgres inbox on
// the first and a bare loop on the second, running for the whole run.
type kafkaStore struct {
	producer *kgo.Client
	consumer *kgo.Client
	topic    string
	// The bare row's topic, its member of a group of its own and the
	// tracker of its records.
	bareTopic  string
	bareClient *kgo.Client
	bare       *tracker

	mu sync.Mutex
	// done is, per partition, the offset after the last record the
	// consumer finished (applied, or skipped as a duplicate).
	done map[int32]int64
	// waits are, per partition, the operations waiting for an offset.
	waits  map[int32][]*offsetWait
	err    error
	failed chan struct{}
}

// offsetWait is one operation waiting until its partition is done up to
// offset.
type offsetWait struct {
	offset int64
	done   chan struct{}
}

var kafkaResource = &resource{
	name:       "kafka",
	background: true,
	// Quiet, the consumers stop fetching, while watermill-sql-exactly-once
	// runs.
	quiet: func(b *bench, on bool) {
		switch {
		case b.kafka == nil:
		case on:
			b.kafka.consumer.PauseFetchTopics(b.kafka.topic)
			b.kafka.bareClient.PauseFetchTopics(b.kafka.bareTopic)
		default:
			b.kafka.consumer.ResumeFetchTopics(b.kafka.topic)
			b.kafka.bareClient.ResumeFetchTopics(b.kafka.bareTopic)
		}
	},
	open: func(ctx context.Context, b *bench) (func(), error) {
		k := &kafkaStore{done: map[int32]int64{}, waits: map[int32][]*offsetWait{}, failed: make(chan struct{}), bare: newTracker()}
		return openWith(func(c *cleanup) error { return k.open(ctx, b, c) })
	},
}

// open starts kfake, with a partition per worker, and the consumer.
func (k *kafkaStore) open(ctx context.Context, b *bench, c *cleanup) error {
	kb, err := broker.OpenKafka("", broker.KafkaTimings{}, nil)
	if err != nil {
		return err
	}
	c.add(kb.Close)
	t, err := kb.NewTopic(ctx, "bench", &broker.TopicConfig{Partitions: int32(b.maxW), Subscriptions: []string{"bench"}})
	if err != nil {
		return err
	}
	k.topic = t.Name()
	// Each worker produces to its partition, and at once.
	if k.producer, err = kb.Client(kgo.DefaultProduceTopic(k.topic), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0)); err != nil {
		return err
	}
	c.add(k.producer.Close)
	if k.consumer, err = t.Address("bench").InboxKafkaClient(broker.KafkaTimings{FetchWait: 10 * time.Millisecond}); err != nil {
		return err
	}
	c.add(k.consumer.CloseAllowingRebalance)
	// Its client times its transactions; OnResult tells the row's workers.
	client, err := observedClient(b, &b.txs)
	if err != nil {
		return err
	}
	consumer, err := inboxkafka.New[pgx.Tx](k.consumer, client, b.pg.batchHandler, &inboxkafka.Config{
		Consumer: "bench-kafka", Key: broker.EventIDKey,
		Settings: inboxtransport.Settings{MaxBatch: 100, OnResult: k.observe},
	})
	if err != nil {
		return err
	}
	run := c.background(ctx)
	run("inboxkafka consumer", k.fail, consumer.Run)
	// The bare row: the same kind of topic and client, a loop that takes
	// up to a batch, tells the tracker and commits it.
	bt, err := kb.NewTopic(ctx, "bench-bare", &broker.TopicConfig{Partitions: int32(b.maxW), Subscriptions: []string{"bench"}})
	if err != nil {
		return err
	}
	k.bareTopic = bt.Name()
	if k.bareClient, err = bt.Address("bench").InboxKafkaClient(broker.KafkaTimings{FetchWait: 10 * time.Millisecond}); err != nil {
		return err
	}
	c.add(k.bareClient.CloseAllowingRebalance)
	run("the bare Kafka loop", k.bare.fail, func(ctx context.Context) error { return kafkaBareLoop(ctx, k.bareClient, k.bare) })
	b.kafka = k
	return nil
}

// kafkaBareLoop is what a Kafka consumer without an inbox does, batched
// as inboxkafka batches: poll up to brokerBatch records, tell t, and
// commit their offsets without waiting for the commit before the next
// poll, as inboxkafka's commit loop does not (kgo sends the commits in
// order, one after the other).
func kafkaBareLoop(ctx context.Context, cl *kgo.Client, t *tracker) error {
	for {
		fs := cl.PollRecords(ctx, brokerBatch)
		if ctx.Err() != nil {
			return nil
		}
		if fs.IsClientClosed() {
			return errors.New("the client was closed")
		}
		offsets := map[string]map[int32]kgo.EpochOffset{}
		fs.EachRecord(func(r *kgo.Record) {
			for _, h := range r.Headers {
				if h.Key == broker.HeaderEventID {
					t.done(string(h.Value))
				}
			}
			if offsets[r.Topic] == nil {
				offsets[r.Topic] = map[int32]kgo.EpochOffset{}
			}
			offsets[r.Topic][r.Partition] = kgo.EpochOffset{Epoch: r.LeaderEpoch, Offset: r.Offset + 1}
		})
		if len(offsets) > 0 {
			cl.CommitOffsets(ctx, offsets, nil)
		}
	}
}

// kafkaBareAck produces the row's batch of records to the worker's
// partition of the bare topic and waits until the bare loop has taken
// them.
func kafkaBareAck(ctx context.Context, b *bench, w *worker) error {
	es := w.next(b, w.batch)
	k := b.kafka
	part := int32(w.index % b.maxW)
	return k.bare.roundTrip(ctx, w, es, func(ctx context.Context) error {
		recs := make([]*kgo.Record, len(es))
		for i, m := range messages(es) {
			recs[i] = broker.KafkaRecord(m)
			recs[i].Topic, recs[i].Partition = k.bareTopic, part
		}
		return k.producer.ProduceSync(ctx, recs...).FirstErr()
	})
}

// observe is the consumer's OnResult. It wakes an operation only when its
// partition is done up to the operation's last record, as the other
// broker rows' tracker does, so that the row pays one wake-up per batch.
func (k *kafkaStore) observe(r inboxkafka.Result) {
	if r.Err != nil && !r.DeadLettered {
		return // retried by the consumer
	}
	part, next := r.Message.Source.Partition, r.Message.Source.Offset+1
	k.mu.Lock()
	defer k.mu.Unlock()
	if next <= k.done[part] {
		return
	}
	k.done[part] = next
	ws := k.waits[part]
	kept := ws[:0]
	for _, w := range ws {
		if w.offset <= next {
			close(w.done)
			continue
		}
		kept = append(kept, w)
	}
	k.waits[part] = kept
}

func (k *kafkaStore) fail(err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.err == nil {
		k.err = err
		close(k.failed)
	}
}

// wait returns a channel closed once part is done up to offset.
func (k *kafkaStore) wait(part int32, offset int64) <-chan struct{} {
	w := &offsetWait{offset: offset, done: make(chan struct{})}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.done[part] >= offset {
		close(w.done)
	} else {
		k.waits[part] = append(k.waits[part], w)
	}
	return w.done
}

// forget drops the wait for done, if it is still waiting.
func (k *kafkaStore) forget(part int32, done <-chan struct{}) {
	k.mu.Lock()
	defer k.mu.Unlock()
	ws := k.waits[part]
	for i, w := range ws {
		if w.done == done {
			k.waits[part] = append(ws[:i], ws[i+1:]...)
			return
		}
	}
}

// kafkaInboxBatch produces the row's batch of records to the worker's
// partition and waits until the consumer has processed the batch the
// worker produced before (worker.pipeline): one op is a batch through the
// broker, the inbox and the commit.
func kafkaInboxBatch(ctx context.Context, b *bench, w *worker) error {
	es := w.next(b, w.batch)
	k := b.kafka
	part := int32(w.index % b.maxW)
	recs := make([]*kgo.Record, len(es))
	for i, m := range messages(es) {
		recs[i] = broker.KafkaRecord(m)
		recs[i].Partition = part
	}
	sendCtx, cancel := context.WithTimeout(ctx, brokerOpTimeout)
	defer cancel()
	if err := k.producer.ProduceSync(sendCtx, recs...).FirstErr(); err != nil {
		return timedOut(ctx, sendCtx, fmt.Errorf("produce: %w", err))
	}
	done := k.wait(part, recs[len(recs)-1].Offset+1)
	return w.pipeline(ctx, func(ctx context.Context) error {
		opCtx, cancel := context.WithTimeout(ctx, brokerOpTimeout)
		defer cancel()
		select {
		case <-done:
			return nil
		case <-k.failed:
			k.forget(part, done)
			k.mu.Lock()
			defer k.mu.Unlock()
			return k.err
		case <-opCtx.Done():
			k.forget(part, done)
			return timedOut(ctx, opCtx, opCtx.Err())
		}
	})
}
