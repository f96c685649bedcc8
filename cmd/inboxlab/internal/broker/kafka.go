package broker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/txinbox/inbox/inboxkafka"
	"github.com/txinbox/inbox/outbox"
)

// KafkaTimings are the timings of a Kafka run's consumers: short group
// timings move the partitions of a consumer that was killed without
// leaving its group to the others quickly. The zero value leaves kgo's and
// kfake's defaults.
type KafkaTimings struct {
	// Session is how long a member that stopped heartbeating keeps its
	// partitions.
	Session time.Duration
	// Heartbeat is how often a member heartbeats.
	Heartbeat time.Duration
	// Rebalance is how long a rebalance waits for the members to rejoin:
	// the classic protocol waits that long for a member that died in one.
	Rebalance time.Duration
	// FetchWait is how long a fetch waits for records.
	FetchWait time.Duration
}

// opts are the client options of g.
func (g KafkaTimings) opts() []kgo.Opt {
	var opts []kgo.Opt
	if g.Session > 0 {
		opts = append(opts, kgo.SessionTimeout(g.Session))
	}
	if g.Heartbeat > 0 {
		opts = append(opts, kgo.HeartbeatInterval(g.Heartbeat))
	}
	if g.Rebalance > 0 {
		opts = append(opts, kgo.RebalanceTimeout(g.Rebalance))
	}
	if g.FetchWait > 0 {
		opts = append(opts, kgo.FetchMaxWait(g.FetchWait))
	}
	return opts
}

// kfakeOpts are the options of a kfake cluster whose groups run with g.
func (g KafkaTimings) kfakeOpts() []kfake.Opt {
	opts := []kfake.Opt{kfake.NumBrokers(1)}
	configs := map[string]string{}
	if g.Session > 0 {
		opts = append(opts, kfake.GroupMinSessionTimeout(min(g.Session, 500*time.Millisecond)))
		configs["group.consumer.session.timeout.ms"] = fmt.Sprint(g.Session.Milliseconds())
	}
	if g.Heartbeat > 0 {
		configs["group.consumer.heartbeat.interval.ms"] = fmt.Sprint(g.Heartbeat.Milliseconds())
	}
	if len(configs) > 0 {
		opts = append(opts, kfake.BrokerConfigs(configs))
	}
	return opts
}

// Kafka is kfake in this process, or a real cluster.
type Kafka struct {
	seeds   []string
	cluster *kfake.Cluster // nil on a real cluster
	timings KafkaTimings
	log     io.Writer
	// producer sends the topics' messages and is their outbox sinks'
	// client.
	producer *kgo.Client

	// topics are those created on a real cluster.
	topics created

	mu sync.Mutex
	// pending are, per group, the error codes to answer its next offset
	// commits with (FailCommit).
	pending map[string][]int16
	control sync.Once
}

// OpenKafka starts kfake, or reaches the cluster at brokers
// (host:port[,host:port]). Its consumers run with timings.
// log receives what the consumers of Topic.Subscribe pass over; nil
// discards it.
func OpenKafka(brokers string, timings KafkaTimings, log io.Writer) (*Kafka, error) {
	k := &Kafka{timings: timings, log: cmp.Or[io.Writer](log, io.Discard), pending: map[string][]int16{}}
	if brokers == "" {
		cluster, err := kfake.NewCluster(timings.kfakeOpts()...)
		if err != nil {
			return nil, fmt.Errorf("start kfake: %w", err)
		}
		k.cluster, k.seeds = cluster, cluster.ListenAddrs()
	} else {
		k.seeds = strings.Split(brokers, ",")
	}
	var err error
	if k.producer, err = k.Client(); err != nil {
		k.Close()
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	return k, nil
}

// Transport is TransportKafka.
func (k *Kafka) Transport() string { return TransportKafka }

// Kind says which Kafka it is.
func (k *Kafka) Kind() string {
	if k.cluster != nil {
		return "in-process Kafka (kfake)"
	}
	return "Kafka at " + k.Brokers()
}

// Brokers are the cluster's seed brokers, host:port[,host:port].
func (k *Kafka) Brokers() string { return strings.Join(k.seeds, ",") }

// Client returns a client of the cluster with opts.
func (k *Kafka) Client(opts ...kgo.Opt) (*kgo.Client, error) {
	return kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(k.seeds...)}, opts...)...)
}

// NewTopic creates the topic name, with c.Partitions partitions.
func (k *Kafka) NewTopic(ctx context.Context, name string, c *TopicConfig) (Topic, error) {
	partitions := int32(1)
	if c != nil && c.Partitions > 0 {
		partitions = c.Partitions
	}
	if err := k.createTopic(ctx, name, partitions); err != nil {
		return nil, err
	}
	return &kafkaTopic{k: k, name: name, partitions: partitions}, nil
}

// createTopic creates a topic, on kfake as on a real cluster.
func (k *Kafka) createTopic(ctx context.Context, topic string, partitions int32) error {
	req := kmsg.NewPtrCreateTopicsRequest()
	t := kmsg.NewCreateTopicsRequestTopic()
	t.Topic, t.NumPartitions, t.ReplicationFactor = topic, partitions, -1
	req.Topics = append(req.Topics, t)
	req.TimeoutMillis = 30_000
	resp, err := req.RequestWith(ctx, k.producer)
	if err == nil && len(resp.Topics) == 1 {
		err = kerr.ErrorForCode(resp.Topics[0].ErrorCode)
	}
	if err != nil {
		return fmt.Errorf("create topic %s on %s: %w", topic, k.Kind(), err)
	}
	if k.cluster == nil {
		k.topics.add(topic)
	}
	return nil
}

// FailCommit makes kfake answer the next offset commit of group with code,
// an error a real broker gives during rebalances; it reports false, and
// does nothing, on a real cluster.
func (k *Kafka) FailCommit(group string, code int16) bool {
	if k.cluster == nil {
		return false
	}
	k.control.Do(func() { k.cluster.ControlKey(int16(kmsg.OffsetCommit), k.failCommit) })
	k.mu.Lock()
	k.pending[group] = append(k.pending[group], code)
	k.mu.Unlock()
	return true
}

// Calm drops the commit failures not yet served.
func (k *Kafka) Calm() {
	k.mu.Lock()
	clear(k.pending)
	k.mu.Unlock()
}

// failCommit answers an offset commit with its group's next pending error,
// if any.
func (k *Kafka) failCommit(req kmsg.Request) (kmsg.Response, error, bool) {
	k.cluster.KeepControl()
	r := req.(*kmsg.OffsetCommitRequest)
	k.mu.Lock()
	codes := k.pending[r.Group]
	if len(codes) == 0 {
		k.mu.Unlock()
		return nil, nil, false
	}
	code := codes[0]
	k.pending[r.Group] = codes[1:]
	k.mu.Unlock()
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

// Close deletes the topics created on a real cluster, or stops kfake.
func (k *Kafka) Close() { k.Cleanup() }

// Cleanup is Close, and says what it deleted and stopped.
func (k *Kafka) Cleanup() []string {
	var said []string
	if k.producer != nil {
		if topics := k.topics.take(); len(topics) > 0 {
			req := kmsg.NewPtrDeleteTopicsRequest()
			req.TopicNames = topics
			for _, name := range topics {
				t := kmsg.NewDeleteTopicsRequestTopic()
				t.Topic = kmsg.StringPtr(name)
				req.Topics = append(req.Topics, t)
			}
			req.TimeoutMillis = 10_000
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			resp, err := req.RequestWith(ctx, k.producer)
			cancel()
			if k.cluster == nil {
				// kfake's topics go with it: only a real cluster's are said.
				for _, name := range topics {
					terr := err
					if err == nil {
						for _, t := range resp.Topics {
							if t.Topic != nil && *t.Topic == name {
								terr = kerr.ErrorForCode(t.ErrorCode)
							}
						}
					}
					said = append(said, deleted("topic", name, terr))
				}
			}
		}
		k.producer.Close()
	}
	if k.cluster != nil {
		k.cluster.Close()
		said = append(said, "stopped the "+k.Kind())
	}
	return said
}

// KafkaRecord is m as a record: its key, its body, and its id in the
// HeaderEventID header.
func KafkaRecord(m Message) *kgo.Record {
	r := &kgo.Record{Value: m.Body, Headers: make([]kgo.RecordHeader, 0, 1+len(m.Headers))}
	if m.Key != "" {
		r.Key = []byte(m.Key)
	}
	r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderEventID, Value: []byte(m.ID)})
	for k, v := range m.Headers {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
	}
	return r
}

// kafkaTopic is a topic, whose subscriptions are consumer groups.
type kafkaTopic struct {
	k          *Kafka
	name       string
	partitions int32
}

func (t *kafkaTopic) Name() string { return t.name }

func (t *kafkaTopic) Send(ctx context.Context, msgs ...Message) error {
	recs := make([]*kgo.Record, len(msgs))
	for i, m := range msgs {
		recs[i] = KafkaRecord(m)
		recs[i].Topic = t.name
	}
	return t.k.producer.ProduceSync(ctx, recs...).FirstErr()
}

func (t *kafkaTopic) Address(sub string) Address {
	return Address{Transport: TransportKafka, Brokers: t.k.Brokers(), Topic: t.name, Group: t.name + "." + sub}
}

// Subscribe starts a member of sub's group that commits offsets only in
// Ack. It leaves the group when it closes, so it needs no short session:
// it keeps kgo's group timings, with which a loaded machine (a race
// detector, a busy CI) does not lose it from its group between two
// heartbeats, and fail its commit, as a short session would.
func (t *kafkaTopic) Subscribe(_ context.Context, sub string, c *PollConfig) (Poller, error) {
	a := t.Address(sub)
	cl, err := a.KafkaClient(append(a.groupOpts(KafkaTimings{FetchWait: t.k.timings.FetchWait}), kgo.DisableAutoCommit())...)
	if err != nil {
		return nil, err
	}
	return &kafkaPoller{cl: cl, c: c.withDefaults(), group: a.Group, log: t.k.log}, nil
}

// Stored sums the end offsets of the topic's partitions.
func (t *kafkaTopic) Stored(ctx context.Context) (int, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = t.name
	for p := range t.partitions {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp = p, -1 // the end
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, t.k.producer)
	if err != nil {
		return 0, fmt.Errorf("list the offsets of %s: %w", t.name, err)
	}
	n := 0
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
				return 0, fmt.Errorf("list the offsets of %s, partition %d: %w", t.name, rp.Partition, err)
			}
			n += int(rp.Offset)
		}
	}
	return n, nil
}

func (t *kafkaTopic) OutboxSink() (outbox.Sink, error) {
	return inboxkafka.NewOutboxSink(t.k.producer), nil
}

// kafkaPoller is a member of a consumer group.
type kafkaPoller struct {
	cl    *kgo.Client
	c     PollConfig
	group string
	log   io.Writer
}

func (p *kafkaPoller) Poll(ctx context.Context) ([]*Delivery, error) {
	pctx, cancel := context.WithTimeout(ctx, p.c.Wait)
	fs := p.cl.PollRecords(pctx, p.c.Batch)
	cancel()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	fs.EachError(func(_ string, _ int32, err error) {
		if !errors.Is(err, context.DeadlineExceeded) {
			fmt.Fprintf(p.log, "broker: group %s: fetch: %v\n", p.group, err)
		}
	})
	var out []*Delivery
	fs.EachRecord(func(r *kgo.Record) {
		d := &Delivery{Body: r.Value, raw: r}
		d.ID = d.Header(HeaderEventID)
		out = append(out, d)
	})
	return out, nil
}

func (p *kafkaPoller) Ack(ctx context.Context, ds []*Delivery) error {
	recs := make([]*kgo.Record, len(ds))
	for i, d := range ds {
		recs[i] = d.raw.(*kgo.Record)
	}
	return p.cl.CommitRecords(ctx, recs...)
}

// rebalancing reports whether err is a group's refusal of an offset commit
// during a rebalance, which a commit after the rebalance does not meet.
func rebalancing(err error) bool {
	return errors.Is(err, kerr.RebalanceInProgress) || errors.Is(err, kerr.IllegalGeneration)
}

// Close leaves the group without committing.
func (p *kafkaPoller) Close() { p.cl.Close() }
