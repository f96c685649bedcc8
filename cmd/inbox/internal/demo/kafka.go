package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/txinbox/inbox/internal/testdb"
)

// Group timings: short, so that a crashed member's replacement starts at
// once.
const (
	session   = 1500 * time.Millisecond
	heartbeat = 100 * time.Millisecond
)

// kafka is the demo's broker: kfake in this process, or a real cluster.
// The topic has one partition, so that the order of the records, and so
// every count, is the same on every run.
type kafka struct {
	cluster *kfake.Cluster
	seeds   []string
	topic   string
	log     io.Writer
}

func newKafka(ctx context.Context, brokers string, log io.Writer) (*kafka, error) {
	k := &kafka{topic: "orders-" + testdb.RandomSuffix(), log: log}
	if brokers == "" {
		cluster, err := kfake.NewCluster(
			kfake.NumBrokers(1),
			kfake.SeedTopics(1, k.topic),
			kfake.GroupMinSessionTimeout(500*time.Millisecond),
			kfake.BrokerConfigs(map[string]string{
				"group.consumer.heartbeat.interval.ms": fmt.Sprint(heartbeat.Milliseconds()),
				"group.consumer.session.timeout.ms":    fmt.Sprint(session.Milliseconds()),
			}),
		)
		if err != nil {
			return nil, fmt.Errorf("demo: start kfake: %w", err)
		}
		k.cluster, k.seeds = cluster, cluster.ListenAddrs()
		return k, nil
	}
	k.seeds = strings.Split(brokers, ",")
	if err := k.createTopic(ctx); err != nil {
		return nil, err
	}
	return k, nil
}

// createTopic creates the one-partition topic on a real cluster.
func (k *kafka) createTopic(ctx context.Context) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.seeds...))
	if err != nil {
		return err
	}
	defer cl.Close()
	req := kmsg.NewPtrCreateTopicsRequest()
	t := kmsg.NewCreateTopicsRequestTopic()
	t.Topic, t.NumPartitions, t.ReplicationFactor = k.topic, 1, -1
	req.Topics = append(req.Topics, t)
	req.TimeoutMillis = 30_000
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("demo: create topic on %v: %w", k.seeds, err)
	}
	for _, rt := range resp.Topics {
		if err := kerr.ErrorForCode(rt.ErrorCode); err != nil {
			return fmt.Errorf("demo: create topic %s: %w", k.topic, err)
		}
	}
	return nil
}

func (k *kafka) kind() string {
	if k.cluster != nil {
		return "in-process Kafka (kfake)"
	}
	return "Kafka at " + strings.Join(k.seeds, ",")
}

// produce sends the records in order, each with its event id in the
// event-id header.
func (k *kafka) produce(ctx context.Context, records []event) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.seeds...), kgo.DefaultProduceTopic(k.topic))
	if err != nil {
		return err
	}
	defer cl.Close()
	recs := make([]*kgo.Record, len(records))
	for i, e := range records {
		recs[i] = &kgo.Record{
			Key:     []byte(e.Account),
			Value:   e.body(),
			Headers: []kgo.RecordHeader{{Key: "event-id", Value: []byte(e.ID)}},
		}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("demo: produce: %w", err)
	}
	return nil
}

// groupOpts are the options every consumer of the demo uses.
func (k *kafka) groupOpts(group string) []kgo.Opt {
	return []kgo.Opt{
		kgo.SeedBrokers(k.seeds...),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(k.topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(50 * time.Millisecond),
		kgo.HeartbeatInterval(heartbeat),
		kgo.SessionTimeout(session),
	}
}

func (k *kafka) close() {
	if k.cluster != nil {
		k.cluster.Close()
	}
}

// subscribe starts a member of the strategy's group, which commits offsets
// only when told to.
func (k *kafka) subscribe(_ context.Context, strategy, consumer string) (subscription, error) {
	group := fmt.Sprintf("demo-%s-%s", strategy, consumer)
	cl, err := kgo.NewClient(append(k.groupOpts(group), kgo.DisableAutoCommit())...)
	if err != nil {
		return nil, err
	}
	return &kafkaSub{cl: cl, log: k.log, name: strategy + "/" + consumer}, nil
}

func (k *kafka) inboxArgs(_ context.Context, consumer string) ([]string, error) {
	return []string{
		"--brokers", strings.Join(k.seeds, ","), "--topic", k.topic,
		"--group", "demo-inbox-" + consumer,
	}, nil
}

// kafkaSub is a member of a consumer group.
type kafkaSub struct {
	cl   *kgo.Client
	log  io.Writer
	name string
}

func (s *kafkaSub) poll(ctx context.Context) ([]*record, error) {
	pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	fs := s.cl.PollFetches(pctx)
	cancel()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	fs.EachError(func(_ string, _ int32, err error) {
		if !errors.Is(err, context.DeadlineExceeded) {
			fmt.Fprintf(s.log, "demo: %s: fetch: %v\n", s.name, err)
		}
	})
	var out []*record
	for _, rec := range fs.Records() {
		r := &record{
			index: int(rec.Offset),
			key:   fmt.Sprintf("%s/%d/%d", rec.Topic, rec.Partition, rec.Offset),
			body:  rec.Value,
			raw:   rec,
		}
		for _, h := range rec.Headers {
			if h.Key == "event-id" {
				r.id = string(h.Value)
			}
		}
		out = append(out, r)
	}
	return out, nil
}

func (s *kafkaSub) ack(ctx context.Context, recs []*record) error {
	raw := make([]*kgo.Record, len(recs))
	for i, r := range recs {
		raw[i] = r.raw.(*kgo.Record)
	}
	return s.cl.CommitRecords(ctx, raw...)
}

// close leaves the group without committing.
func (s *kafkaSub) close() { s.cl.Close() }
