package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txinbox/inbox/outbox"
)

// The watermill-sql Forwarder beside the relay: the Go user's outbox as
// its documentation sets it up. Producers publish enveloped messages to an
// SQL topic (forwarder.Publisher over watermill-sql's Publisher, the
// PostgreSQL schema and offsets adapters, in the run's schema), and one
// Forwarder subscribes to it and publishes each message to the same kfake
// as the relay, through a publisher over the same kind of kgo client. It
// drains forwarderEvents events, enqueued beforehand.

// forwarderTopic is the SQL topic the Forwarder reads.
const forwarderTopic = "outbox_forwarder"

// forwarderEvents bounds the events the Forwarder drains: it publishes
// one message at a time, so its rate needs fewer to be read.
const forwarderEvents = 5000

// drainForwarder enqueues n events through watermill-sql's publisher and
// times a Forwarder until kgo confirmed every one.
func (b *bench) drainForwarder(ctx context.Context, producer *kgo.Client, n int) (float64, error) {
	table := func(prefix string) func(topic string) string {
		return func(topic string) string { return b.table(prefix + topic) }
	}
	schema := wsql.DefaultPostgreSQLSchema{GenerateMessagesTableName: table("watermill_")}
	offsets := wsql.DefaultPostgreSQLOffsetsAdapter{GenerateMessagesOffsetsTableName: table("watermill_offsets_")}
	db := wsql.BeginnerFromPgx(b.admin)
	logger := watermill.NopLogger{}

	sqlPub, err := wsql.NewPublisher(db, wsql.PublisherConfig{SchemaAdapter: schema, AutoInitializeSchema: true}, logger)
	if err != nil {
		return 0, fmt.Errorf("watermill-sql publisher: %w", err)
	}
	pub := forwarder.NewPublisher(sqlPub, forwarder.PublisherConfig{ForwarderTopic: forwarderTopic})
	for i := 0; i < n; i += 1000 {
		msgs := make([]*message.Message, min(1000, n-i))
		for j := range msgs {
			msgs[j] = message.NewMessage(watermill.NewUUID(), outboxPayload)
			msgs[j].Metadata.Set("partition_key", "acct-"+strconv.Itoa((i+j)%b.cfg.Accounts))
		}
		if err := pub.Publish("orders", msgs...); err != nil {
			return 0, fmt.Errorf("watermill-sql publish: %w", err)
		}
	}

	sub, err := wsql.NewSubscriber(db, wsql.SubscriberConfig{
		ConsumerGroup: "bench", SchemaAdapter: schema, OffsetsAdapter: offsets, InitializeSchema: true,
		PollInterval: 10 * time.Millisecond,
	}, logger)
	if err != nil {
		return 0, fmt.Errorf("watermill-sql subscriber: %w", err)
	}
	kafka := &kgoPublisher{cl: producer, want: int64(n), done: make(chan struct{})}
	fw, err := forwarder.NewForwarder(sub, kafka, logger, forwarder.Config{ForwarderTopic: forwarderTopic, CloseTimeout: 5 * time.Second})
	if err != nil {
		return 0, fmt.Errorf("watermill forwarder: %w", err)
	}
	start := time.Now()
	rctx, cancel := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- fw.Run(rctx) }()
	defer func() {
		cancel()
		_ = fw.Close()
		<-ran
		_ = sub.Close()
	}()
	select {
	case <-kafka.done:
	case err := <-ran:
		ran <- err
		return 0, fmt.Errorf("the forwarder stopped after %d of %d events: %v", kafka.n.Load(), n, err)
	case <-time.After(10 * time.Minute):
		return 0, fmt.Errorf("the forwarder published %d of %d events in 10 minutes", kafka.n.Load(), n)
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// kgoPublisher is a watermill Publisher over a kgo client, as the relay's
// Kafka sink is: each message a record of the topic, keyed by its
// partition_key, with its metadata and its uuid as headers, produced with
// ProduceSync. It counts the confirmed messages and closes done at want.
type kgoPublisher struct {
	cl   *kgo.Client
	n    atomic.Int64
	want int64
	once sync.Once
	done chan struct{}
}

func (p *kgoPublisher) Publish(topic string, msgs ...*message.Message) error {
	recs := make([]*kgo.Record, len(msgs))
	for i, m := range msgs {
		h := make([]kgo.RecordHeader, 0, len(m.Metadata)+1)
		h = append(h, kgo.RecordHeader{Key: outbox.HeaderEventID, Value: []byte(m.UUID)})
		for k, v := range m.Metadata {
			h = append(h, kgo.RecordHeader{Key: k, Value: []byte(v)})
		}
		recs[i] = &kgo.Record{Topic: topic, Key: []byte(m.Metadata.Get("partition_key")), Value: m.Payload, Headers: h}
	}
	if err := p.cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		return err
	}
	if p.n.Add(int64(len(msgs))) >= p.want {
		p.once.Do(func() { close(p.done) })
	}
	return nil
}

func (p *kgoPublisher) Close() error { return nil }

var _ message.Publisher = (*kgoPublisher)(nil)
