package inboxkafka_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/txinbox/inbox/inboxkafka"
	"github.com/txinbox/inbox/inboxpgx/inboxpgxtest"
	"github.com/txinbox/inbox/inboxtransport/transporttest"
	"github.com/txinbox/inbox/internal/testdb"
	"github.com/txinbox/inbox/outbox"
)

// TestTransport runs the transport conformance suite on kfake, a cluster
// per queue, under the classic group protocol: three partitions, or one
// where order is asked for.
func TestTransport(t *testing.T) { transporttest.Exercise(t, transport) }

// suiteSession is the group session timeout of the suite's consumers:
// short, so that a killed consumer's partitions move on quickly.
const suiteSession = 2 * time.Second

var transport = inboxpgxtest.Transport("kafka", transporttest.Features{Ordered: true, ProcessCrash: true, MaxCrashes: inboxkafka.DefaultMaxCrashes}, newQueue, openQueue)

// queue is a topic of a kfake cluster of its own, and a consumer group.
type queue struct {
	seeds        []string
	topic, group string
	partitions   int
	producer     *kgo.Client
	next         int // the partition of the next record published
	mu           sync.Mutex
}

func newQueue(t testing.TB, opts transporttest.QueueOptions) transporttest.Queue[pgx.Tx] {
	partitions := 3
	if opts.Ordered {
		partitions = 1
	}
	topic := "orders-" + testdb.RandomSuffix()
	cluster, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.SeedTopics(int32(partitions), topic),
		kfake.GroupMinSessionTimeout(500*time.Millisecond),
		kfake.BrokerConfigs(map[string]string{
			"group.consumer.heartbeat.interval.ms": "100",
			"group.consumer.session.timeout.ms":    strconv.Itoa(int(suiteSession.Milliseconds())),
		}),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	q, err := openQueue(strings.Join([]string{strings.Join(cluster.ListenAddrs(), ","), topic, "group-" + testdb.RandomSuffix(), strconv.Itoa(partitions)}, "|"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(q.(*queue).producer.Close)
	return q
}

// openQueue opens the queue named "seeds|topic|group|partitions".
func openQueue(name string) (transporttest.Queue[pgx.Tx], error) {
	parts := strings.Split(name, "|")
	if len(parts) != 4 {
		return nil, errors.New("inboxkafka test: malformed queue name " + name)
	}
	partitions, err := strconv.Atoi(parts[3])
	if err != nil {
		return nil, err
	}
	q := &queue{seeds: strings.Split(parts[0], ","), topic: parts[1], group: parts[2], partitions: partitions}
	q.producer, err = kgo.NewClient(kgo.SeedBrokers(q.seeds...), kgo.DefaultProduceTopic(q.topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return nil, err
	}
	return q, nil
}

func (q *queue) Name() string {
	return strings.Join([]string{strings.Join(q.seeds, ","), q.topic, q.group, strconv.Itoa(q.partitions)}, "|")
}

// Publish spreads msgs over the partitions, one after the other.
func (q *queue) Publish(ctx context.Context, msgs ...transporttest.Message) error {
	recs := make([]*kgo.Record, len(msgs))
	q.mu.Lock()
	for i, m := range msgs {
		recs[i] = &kgo.Record{Partition: int32(q.next % q.partitions), Value: m.Body}
		q.next++
		if m.ID != "" {
			recs[i].Headers = []kgo.RecordHeader{{Key: outbox.HeaderEventID, Value: []byte(m.ID)}}
		}
	}
	q.mu.Unlock()
	return q.producer.ProduceSync(ctx, recs...).FirstErr()
}

func (q *queue) Consumer(opts transporttest.ConsumerOptions[pgx.Tx]) (transporttest.Runner, error) {
	cl, err := kgo.NewClient(consumerOpts(q.seeds, q.group, q.topic, suiteSession, protocols[0])...)
	if err != nil {
		return nil, err
	}
	// A partition has a worker of its own.
	opts.Settings.Workers = 0
	c, err := inboxkafka.New(cl, opts.Client, opts.Handler, &inboxkafka.Config{
		Consumer: opts.Consumer,
		Key:      opts.Key,
		Settings: opts.Settings,
	})
	if err != nil {
		cl.Close()
		return nil, err
	}
	return transporttest.Closing(c.Run, cl.CloseAllowingRebalance), nil
}

// Depth is how many records lie past the group's committed offsets.
func (q *queue) Depth(ctx context.Context) (int, error) {
	end, err := q.offsets(ctx, true)
	if err != nil {
		return 0, err
	}
	committed, err := q.offsets(ctx, false)
	if err != nil {
		return 0, err
	}
	n := 0
	for p, off := range end {
		n += int(off - committed[p])
	}
	return n, nil
}

// offsets returns the end offset of each partition, or the group's
// committed offset (none is 0).
func (q *queue) offsets(ctx context.Context, end bool) (map[int32]int64, error) {
	out := make(map[int32]int64, q.partitions)
	if end {
		req := kmsg.NewPtrListOffsetsRequest()
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = q.topic
		for p := range q.partitions {
			rp := kmsg.NewListOffsetsRequestTopicPartition()
			rp.Partition, rp.Timestamp = int32(p), -1 // latest
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, q.producer)
		if err != nil {
			return nil, err
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					return nil, err
				}
				out[p.Partition] = p.Offset
			}
		}
		return out, nil
	}
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = q.group
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic = q.topic
	for p := range q.partitions {
		rt.Partitions = append(rt.Partitions, int32(p))
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, q.producer)
	if err != nil {
		return nil, err
	}
	// A group that no member has joined yet has committed nothing.
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		return nil, err
	}
	add := func(partition int32, offset int64, code int16) error {
		if err := kerr.ErrorForCode(code); err != nil {
			return err
		}
		out[partition] = max(offset, out[partition])
		return nil
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := add(p.Partition, p.Offset, p.ErrorCode); err != nil {
				return nil, err
			}
		}
	}
	for _, g := range resp.Groups {
		if err := kerr.ErrorForCode(g.ErrorCode); err != nil {
			if errors.Is(err, kerr.GroupIDNotFound) {
				continue
			}
			return nil, err
		}
		for _, t := range g.Topics {
			for _, p := range t.Partitions {
				if err := add(p.Partition, p.Offset, p.ErrorCode); err != nil {
					return nil, err
				}
			}
		}
	}
	return out, nil
}
