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
	topic    string

	mu   sync.Mutex
	cond *sync.Cond
	// done is, per partition, the offset after the last record the
	// consumer finished (applied, or skipped as a duplicate).
	done map[int32]int64
	err  error
}

var kafkaResource = &resource{
	name:       "kafka",
	background: true,
	open: func(ctx context.Context, b *bench) (func(), error) {
		k := &kafkaStore{topic: "bench", done: map[int32]int64{}}
		k.cond = sync.NewCond(&k.mu)
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

func (k *kafkaStore) observe(r inboxkafka.Result) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if r.Err != nil && !r.DeadLettered {
		return // retried by the consumer
	}
	if next := r.Record.Offset + 1; next > k.done[r.Record.Partition] {
		k.done[r.Record.Partition] = next
	}
	k.cond.Broadcast()
}

func (k *kafkaStore) fail(err error) {
	k.mu.Lock()
	k.err = err
	k.mu.Unlock()
	k.cond.Broadcast()
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
	if err := k.producer.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("produce: %w", err)
	}
	want := recs[len(recs)-1].Offset + 1
	stop := context.AfterFunc(ctx, func() { k.mu.Lock(); k.cond.Broadcast(); k.mu.Unlock() })
	defer stop()
	k.mu.Lock()
	defer k.mu.Unlock()
	for k.done[part] < want {
		if k.err != nil {
			return k.err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		k.cond.Wait()
	}
	return nil
}
