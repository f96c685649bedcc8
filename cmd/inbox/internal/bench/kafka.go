package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxkafka"
)

// kafkaStore is the Kafka side of the kafka-inbox-batch-100 row: kfake in
// this process, a topic with a partition per worker, and one inboxkafka
// consumer over the Postgres inbox, running for the whole run.
type kafkaStore struct {
	producer *kgo.Client
	consumer *kgo.Client
	topic    string

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
	// Quiet, the consumer stops fetching, while watermill-sql-exactly-once
	// runs.
	quiet: func(b *bench, on bool) {
		switch {
		case b.kafka == nil:
		case on:
			b.kafka.consumer.PauseFetchTopics(b.kafka.topic)
		default:
			b.kafka.consumer.ResumeFetchTopics(b.kafka.topic)
		}
	},
	open: func(ctx context.Context, b *bench) (func(), error) {
		k := &kafkaStore{topic: "bench", done: map[int32]int64{}, waits: map[int32][]*offsetWait{}, failed: make(chan struct{})}
		cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(int32(b.maxW), k.topic))
		if err != nil {
			return nil, err
		}
		seeds := cluster.ListenAddrs()
		k.producer, err = kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(k.topic),
			kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
		if err != nil {
			cluster.Close()
			return nil, err
		}
		cl, err := kgo.NewClient(append(inboxkafka.ClientOpts(),
			kgo.SeedBrokers(seeds...), kgo.ConsumerGroup("bench"), kgo.ConsumeTopics(k.topic),
			kgo.FetchMaxWait(10*time.Millisecond))...)
		if err != nil {
			k.producer.Close()
			cluster.Close()
			return nil, err
		}
		c, err := inboxkafka.New[pgx.Tx](cl, b.pg.client, b.pg.batchHandler, &inboxkafka.Config{
			Consumer: "bench-kafka",
			Key:      inbox.HeaderKey("event-id"),
			MaxBatch: 100,
			OnResult: k.observe,
		})
		if err != nil {
			cl.Close()
			k.producer.Close()
			cluster.Close()
			return nil, err
		}
		runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			if err := c.Run(runCtx); err != nil {
				k.fail(err)
			}
		}()
		k.consumer = cl
		b.kafka = k
		return func() {
			stop()
			<-stopped
			cl.CloseAllowingRebalance()
			k.producer.Close()
			cluster.Close()
		}, nil
	},
}

// observe is the consumer's OnResult. It wakes an operation only when its
// partition is done up to the operation's last record, as the other
// broker rows' tracker does, so that the row pays one wake-up per batch.
func (k *kafkaStore) observe(r inboxkafka.Result) {
	if r.Err != nil && !r.DeadLettered {
		return // retried by the consumer
	}
	part, next := r.Record.Partition, r.Record.Offset+1
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
// partition and waits until the consumer has processed them: one op is the
// end-to-end trip of a batch, through the broker, the inbox and the commit.
func kafkaInboxBatch(ctx context.Context, b *bench, w *worker) error {
	es := w.next(b, w.batch)
	k := b.kafka
	part := int32(w.index % b.maxW)
	recs := make([]*kgo.Record, len(es))
	for i, e := range es {
		recs[i] = &kgo.Record{Partition: part, Value: e.msg.Payload,
			Headers: []kgo.RecordHeader{{Key: "event-id", Value: []byte(e.msg.ID)}}}
	}
	opCtx, cancel := context.WithTimeout(ctx, brokerOpTimeout)
	defer cancel()
	if err := k.producer.ProduceSync(opCtx, recs...).FirstErr(); err != nil {
		return timedOut(ctx, opCtx, fmt.Errorf("produce: %w", err))
	}
	done := k.wait(part, recs[len(recs)-1].Offset+1)
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
}
