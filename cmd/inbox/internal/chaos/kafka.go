package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxkafka"
	"github.com/txinbox/inbox/internal/testdb"
)

// The Kafka timings of a run: a short session, so that the partitions of a
// consumer killed without leaving the group move to the others quickly.
//
// The rebalance timeout is short too: the classic group protocol waits that
// long for a member that died during a rebalance, and with kgo's default
// (60s) a run with a kill every few seconds spends most of its time waiting
// for dead members. A revoke takes at most twice the drain timeout, which
// must stay under it.
const (
	kafkaPartitions       = 6
	kafkaSession          = 1500 * time.Millisecond
	kafkaHeartbeat        = 150 * time.Millisecond
	kafkaRebalanceTimeout = 5 * time.Second
	kafkaDrainTimeout     = 2 * time.Second
)

// kafkaTransport is kfake in this process, or a real cluster.
type kafkaTransport struct {
	cluster  *kfake.Cluster
	seeds    []string
	topic    string
	group    string
	producer *kgo.Client

	mu      sync.Mutex
	pending []int16 // error codes to answer the next offset commits with
}

func newKafka(ctx context.Context, cfg *Config) (*kafkaTransport, error) {
	t := &kafkaTransport{topic: "inbox-chaos-" + testdb.RandomSuffix(), group: "inbox-chaos-" + testdb.RandomSuffix()}
	if cfg.Brokers == "" {
		cluster, err := kfake.NewCluster(
			kfake.NumBrokers(1),
			kfake.SeedTopics(kafkaPartitions, t.topic),
			kfake.GroupMinSessionTimeout(500*time.Millisecond),
			kfake.BrokerConfigs(map[string]string{
				"group.consumer.heartbeat.interval.ms": fmt.Sprint(kafkaHeartbeat.Milliseconds()),
				"group.consumer.session.timeout.ms":    fmt.Sprint(kafkaSession.Milliseconds()),
			}),
		)
		if err != nil {
			return nil, fmt.Errorf("chaos: start kfake: %w", err)
		}
		t.cluster = cluster
		t.seeds = cluster.ListenAddrs()
		cluster.ControlKey(int16(kmsg.OffsetCommit), t.failCommit)
	} else {
		t.seeds = strings.Split(cfg.Brokers, ",")
	}
	producer, err := kgo.NewClient(kgo.SeedBrokers(t.seeds...), kgo.AllowAutoTopicCreation(),
		kgo.DefaultProduceTopic(t.topic), kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)))
	if err != nil {
		t.close()
		return nil, fmt.Errorf("chaos: kafka producer: %w", err)
	}
	t.producer = producer
	return t, nil
}

// send produces e once, keyed by its account so that an account's events
// stay in order.
func (t *kafkaTransport) send(ctx context.Context, e event) error {
	rec := &kgo.Record{
		Key:     []byte(fmt.Sprint(e.Account)),
		Value:   e.body(),
		Headers: []kgo.RecordHeader{{Key: "event-id", Value: []byte(e.ID)}},
	}
	return t.producer.ProduceSync(ctx, rec).FirstErr()
}

func (t *kafkaTransport) consumerArgs() []string {
	return []string{"--transport", "kafka", "--brokers", strings.Join(t.seeds, ","), "--topic", t.topic, "--group", t.group}
}

// injectFault makes kfake answer the next offset commit of the run's group
// with an error a real broker gives during rebalances.
func (t *kafkaTransport) injectFault(r *rand.Rand) bool {
	if t.cluster == nil {
		return false
	}
	codes := []int16{kerr.RebalanceInProgress.Code, kerr.IllegalGeneration.Code, kerr.UnknownMemberID.Code, kerr.CoordinatorLoadInProgress.Code}
	t.mu.Lock()
	t.pending = append(t.pending, codes[r.IntN(len(codes))])
	t.mu.Unlock()
	return true
}

// failCommit answers an offset commit with the next pending error, if any.
func (t *kafkaTransport) failCommit(req kmsg.Request) (kmsg.Response, error, bool) {
	t.cluster.KeepControl()
	r := req.(*kmsg.OffsetCommitRequest)
	t.mu.Lock()
	if r.Group != t.group || len(t.pending) == 0 {
		t.mu.Unlock()
		return nil, nil, false
	}
	code := t.pending[0]
	t.pending = t.pending[1:]
	t.mu.Unlock()
	resp := r.ResponseKind().(*kmsg.OffsetCommitResponse)
	for _, rt := range r.Topics {
		st := kmsg.NewOffsetCommitResponseTopic()
		st.Topic = rt.Topic
		st.TopicID = rt.TopicID
		for _, p := range rt.Partitions {
			sp := kmsg.NewOffsetCommitResponseTopicPartition()
			sp.Partition = p.Partition
			sp.ErrorCode = code
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp, nil, true
}

func (t *kafkaTransport) calm() {
	t.mu.Lock()
	t.pending = nil
	t.mu.Unlock()
}

// redelivery: the partitions of a member that was killed move to the
// others once its session times out and the rebalance completes.
func (t *kafkaTransport) redelivery() time.Duration {
	return kafkaSession + kafkaRebalanceTimeout
}

func (t *kafkaTransport) close() {
	if t.producer != nil {
		t.producer.Close()
	}
	if t.cluster != nil {
		t.cluster.Close()
	}
}

// runKafkaConsumer runs the inboxkafka adapter in a consumer process.
func runKafkaConsumer(ctx context.Context, f *consumerFlags, client *inbox.Client[pgx.Tx], h inbox.Handler[pgx.Tx]) error {
	opts := append(inboxkafka.ClientOpts(),
		kgo.SeedBrokers(strings.Split(f.brokers, ",")...),
		kgo.ConsumerGroup(f.group),
		kgo.ConsumeTopics(f.topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100*time.Millisecond),
		kgo.HeartbeatInterval(kafkaHeartbeat),
		kgo.SessionTimeout(kafkaSession),
		kgo.RebalanceTimeout(kafkaRebalanceTimeout),
	)
	if debugLog() {
		opts = append(opts, kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelInfo, nil)))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	defer cl.CloseAllowingRebalance()
	c, err := inboxkafka.New(cl, client, h, &inboxkafka.Config{
		Consumer:   f.consumer,
		Key:        inbox.HeaderKey("event-id"),
		MaxBatch:   100,
		MinBackoff: 10 * time.Millisecond,
		MaxBackoff: time.Second,
		// Chaos fails messages for reasons that are not theirs.
		MaxAttempts:  1000,
		DrainTimeout: kafkaDrainTimeout,
		Logger:       consumerLogger(),
	})
	if err != nil {
		return err
	}
	return c.Run(ctx)
}
