// Package broker is the lab's one way to its four brokers, for the demo,
// the chaos runs and the benchmarks: it starts one in this process (kfake,
// goaws, an embedded NATS server) or reaches a real one (Kafka brokers, an
// SQS endpoint, a NATS URL, RabbitMQ by URL); creates the topics, streams,
// exchanges and queues a run needs and deletes them when the run ends;
// produces messages with their event id in a header; consumes them without
// an inbox (poll a batch, ack it), for the consumers the lab writes by hand;
// tells a consumer process where its messages are (Address) and hands out
// the clients the inbox adapters take; and injects the broker faults of the
// chaos runs.
//
// A Broker is a server; a Topic is what a run sends to, with subscriptions,
// each of which gets every message: a consumer group of a Kafka topic, a
// durable consumer of a NATS stream, a queue bound to a RabbitMQ fanout
// exchange, the one queue of SQS. The typed brokers (Kafka, NATS, Rabbit,
// SQS) also offer what a caller needs below that model, where it lays its
// messages out itself (the benchmarks' partition per worker).
//
// What is one caller's own stays with it: the demo's crash windows, the
// benchmarks' trackers, the chaos schedule, and the inbox adapters'
// configurations, which each caller builds from the clients handed out here.
package broker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"sync"
	"time"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/outbox"
)

// The transports, as the lab's commands name them.
const (
	TransportKafka    = "kafka"
	TransportSQS      = "sqs"
	TransportNATS     = "nats"
	TransportRabbitMQ = "rabbitmq"
)

// HeaderEventID is the header that carries a message's event id, on every
// broker: the header the inbox adapters and the outbox use.
const HeaderEventID = outbox.HeaderEventID

// EventIDKey is the inbox key of what the lab sends: the event id in the
// HeaderEventID header.
var EventIDKey = inbox.HeaderKey(HeaderEventID)

// DefaultAMQPURL is the machine's RabbitMQ.
const DefaultAMQPURL = "amqp://guest:guest@127.0.0.1:5672/"

// Config says which broker Open starts or reaches.
type Config struct {
	// Transport is TransportKafka, TransportSQS, TransportNATS or
	// TransportRabbitMQ.
	Transport string
	// Brokers names a real Kafka cluster, host:port[,host:port]. Empty
	// starts kfake in this process.
	Brokers string
	// Kafka are the timings of the run's Kafka consumers: kfake's group
	// timings, and the fetch wait of the consumers Topic.Subscribe starts.
	Kafka KafkaTimings
	// SQSEndpoint names a real SQS (or compatible) endpoint. Empty starts
	// goaws in this process.
	SQSEndpoint string
	// NATSURL names a NATS server with JetStream. Empty starts one in this
	// process.
	NATSURL string
	// AMQPURL names a RabbitMQ server. Empty is DefaultAMQPURL.
	AMQPURL string
	// ProxyConsumers makes RabbitMQ's consumers (Topic.Address,
	// Topic.Subscribe) connect through a TCP proxy in this process, which
	// Rabbit.CutConsumers cuts.
	ProxyConsumers bool
	// Log receives what a consumer of Topic.Subscribe passes over: Kafka's
	// fetch errors. Nil discards it.
	Log io.Writer
}

// Open starts or reaches the broker c names. Close it when the run ends.
func Open(c *Config) (Broker, error) {
	switch c.Transport {
	case TransportKafka:
		k, err := OpenKafka(c.Brokers, c.Kafka, c.Log)
		if err != nil {
			return nil, err
		}
		return k, nil
	case TransportSQS:
		return OpenSQS(c.SQSEndpoint), nil
	case TransportNATS:
		n, err := OpenNATS(c.NATSURL)
		if err != nil {
			return nil, err
		}
		return n, nil
	case TransportRabbitMQ:
		r, err := OpenRabbit(c.AMQPURL, c.ProxyConsumers)
		if err != nil {
			return nil, err
		}
		return r, nil
	}
	return nil, fmt.Errorf("transport %q: want kafka, sqs, nats or rabbitmq", c.Transport)
}

// Broker is a broker of a run: *Kafka, *SQS, *NATS or *Rabbit.
type Broker interface {
	// Transport is the broker's TransportKafka, TransportSQS, …
	Transport() string
	// Kind says which broker it is and where, for a log line.
	Kind() string
	// NewTopic creates a topic of the run, with its subscriptions.
	NewTopic(ctx context.Context, name string, c *TopicConfig) (Topic, error)
	// Close deletes what the run created on the broker, and stops it if it
	// runs in this process.
	Close()
	// Cleanup is Close, and says what it deleted and stopped, as phrases
	// of the line of an interrupted run: "deleted topic x".
	Cleanup() []string
}

// TopicConfig configures a topic. The zero value is valid.
type TopicConfig struct {
	// Partitions is a Kafka topic's partition count. Defaults to 1, where
	// the messages stay in the order they were sent.
	Partitions int32
	// Subscriptions name the topic's subscriptions, each of which gets
	// every message: a consumer group (Kafka, named <topic>.<name>), a
	// durable consumer of the stream (NATS), a queue bound to the topic's
	// fanout exchange (RabbitMQ, named <topic>.<name>). An SQS topic is one
	// queue, whatever the names.
	Subscriptions []string
	// Redelivery is how long a message taken and not acknowledged stays
	// out of reach before it is delivered again: the AckWait of the NATS
	// durables, the visibility timeout of the SQS queue. Kafka and RabbitMQ
	// deliver it again when its consumer leaves. Zero is the broker's
	// default.
	Redelivery time.Duration
	// MaxPending bounds the messages a NATS durable hands out
	// unacknowledged (MaxAckPending). Zero is the server's default.
	MaxPending int
}

// Topic is what a run sends to: a Kafka topic, a NATS stream's subject, a
// RabbitMQ fanout exchange, an SQS queue.
type Topic interface {
	// Name is what an outbox record's Topic names to reach the topic, for
	// OutboxSink: the Kafka topic, the NATS subject, the RabbitMQ exchange,
	// the SQS queue URL.
	Name() string
	// Send sends msgs, in order, and waits until the broker has them all.
	Send(ctx context.Context, msgs ...Message) error
	// Subscribe starts a consumer of the subscription sub, on a connection
	// of its own, which reads from where sub's last consumer acknowledged.
	// SQS offers none: the lab consumes it only through inboxsqs.
	Subscribe(ctx context.Context, sub string, c *PollConfig) (Poller, error)
	// Address tells a consumer process where sub is.
	Address(sub string) Address
	// Stored is how many messages the topic holds: Kafka's end offsets
	// summed, the NATS stream's messages, those waiting in the first
	// subscription's RabbitMQ queue. SQS does not say.
	Stored(ctx context.Context) (int, error)
	// OutboxSink is an outbox.Sink to the topic, through the adapter's own
	// sink; its records name the topic with Name.
	OutboxSink() (outbox.Sink, error)
}

// Message is a message the lab sends.
type Message struct {
	// ID is the event id, sent in the HeaderEventID header (a message
	// attribute on SQS).
	ID string
	// Key is the Kafka record's key, which chooses its partition; empty
	// sends none. The other brokers have no key.
	Key string
	// Body is the payload.
	Body []byte
	// Headers are more headers, beside HeaderEventID.
	Headers map[string]string
}

// PollConfig configures a consumer of Topic.Subscribe. The zero value is
// valid.
type PollConfig struct {
	// Batch is the most deliveries one Poll returns. Defaults to 100.
	Batch int
	// Prefetch is how many deliveries RabbitMQ hands the consumer
	// unacknowledged (its Qos). Defaults to Batch.
	Prefetch int
	// Wait is how long a Poll waits for deliveries. Defaults to a second.
	Wait time.Duration
	// BatchWait is how long a Poll that has its first delivery waits for
	// more to fill Batch, as inboxrabbit.Config.BatchWait (RabbitMQ only;
	// a NATS fetch waits Wait for its whole batch). Zero takes what is
	// ready.
	BatchWait time.Duration
	// ConfirmAcks makes Ack wait until the broker confirmed each
	// acknowledgement, where it can tell (NATS); otherwise an ack is sent
	// and not waited for. Kafka's commits and SQS's deletes are always
	// waited for; RabbitMQ confirms none.
	ConfirmAcks bool
}

func (c *PollConfig) withDefaults() PollConfig {
	var out PollConfig
	if c != nil {
		out = *c
	}
	if out.Batch <= 0 {
		out.Batch = 100
	}
	if out.Prefetch <= 0 {
		out.Prefetch = out.Batch
	}
	if out.Wait <= 0 {
		out.Wait = time.Second
	}
	return out
}

// Poller is a consumer without an inbox: it takes the deliveries of a
// subscription and acknowledges them. A Poller is used by one goroutine.
type Poller interface {
	// Poll returns the deliveries that arrived, at most PollConfig.Batch,
	// waiting up to PollConfig.Wait for some; none when none came. It
	// returns ctx's error once ctx is done.
	Poll(ctx context.Context) ([]*Delivery, error)
	// Ack acknowledges ds: commits their offsets, acks them, deletes them.
	Ack(ctx context.Context, ds []*Delivery) error
	// Close ends the consumer without acknowledging anything more, as a
	// crash does: the broker delivers what was not acknowledged again.
	Close()
}

// Delivery is a message a Poller took.
type Delivery struct {
	// ID is the HeaderEventID header.
	ID   string
	Body []byte
	// raw is the broker's own delivery: a *kgo.Record, a jetstream.Msg or
	// an amqp.Delivery.
	raw any
}

// Read hands fn each of the first want messages of sub, in order, and
// acknowledges them, until ctx is done.
func Read(ctx context.Context, t Topic, sub string, want int, fn func(*Delivery) error) error {
	p, err := t.Subscribe(ctx, sub, nil)
	if err != nil {
		return err
	}
	defer p.Close()
	for got := 0; got < want; {
		ds, err := p.Poll(ctx)
		if err != nil {
			return fmt.Errorf("read %d of %d messages: %w", got, want, err)
		}
		ds = ds[:min(len(ds), want-got)]
		for _, d := range ds {
			if err := fn(d); err != nil {
				return err
			}
		}
		if err := Ack(ctx, p, ds); err != nil {
			return err
		}
		got += len(ds)
	}
	return nil
}

// rebalanceWait bounds how long Ack waits for a consumer group to settle.
const rebalanceWait = 30 * time.Second

// Ack acknowledges ds through p. When a Kafka group refused the commit
// because it was rebalancing (a member joined or left between the poll and
// the commit, as a loaded machine makes likely), it commits again, for up
// to 30 s: the offsets are still the ones this member processed.
func Ack(ctx context.Context, p Poller, ds []*Delivery) error {
	deadline := time.Now().Add(rebalanceWait)
	wait := 10 * time.Millisecond
	for {
		err := p.Ack(ctx, ds)
		if err == nil || !rebalancing(err) || time.Now().After(deadline) {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return errors.Join(err, ctx.Err())
		case <-t.C:
		}
		wait = min(wait*2, time.Second)
	}
}

// Redacted is the URL u without its password, for a message.
func Redacted(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(an unparsable URL)"
	}
	return p.Redacted()
}

// created are the names of what a broker created for a run, which its
// Close deletes.
type created struct {
	mu    sync.Mutex
	names []string
}

func (c *created) add(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.names = append(c.names, name)
}

// take returns the names, and forgets them.
func (c *created) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	names := c.names
	c.names = nil
	return names
}

// deleted says that Cleanup deleted the kind of thing name, or why it
// could not.
func deleted(kind, name string, err error) string {
	if err != nil {
		return fmt.Sprintf("could not delete %s %s (%v)", kind, name, err)
	}
	return fmt.Sprintf("deleted %s %s", kind, name)
}

// errClosed is a consumer's channel that the broker closed.
var errClosed = errors.New("the broker closed the consumer's channel")
