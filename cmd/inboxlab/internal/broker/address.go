package broker

import (
	"flag"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txinbox/inbox/inboxkafka"
)

// Address tells a consumer process where its messages are: what a
// coordinator passes on the command line of the processes it starts
// (Args), and what they parse (Flags). Only the fields of its transport
// are set.
type Address struct {
	Transport string
	// Kafka: the seed brokers, host:port[,host:port], the topic and the
	// consumer group.
	Brokers, Topic, Group string
	// NATS: the server, the stream and its durable consumer.
	NATSURL, Stream, Durable string
	// RabbitMQ: the server and the queue.
	AMQPURL, Queue string
	// SQS: the endpoint and the queue.
	SQSEndpoint, QueueURL string
}

// flags are a's fields by flag name, in the order Args lists them.
func (a *Address) flags() []struct {
	name string
	v    *string
} {
	return []struct {
		name string
		v    *string
	}{
		{"transport", &a.Transport},
		{"brokers", &a.Brokers}, {"topic", &a.Topic}, {"group", &a.Group},
		{"nats-url", &a.NATSURL}, {"stream", &a.Stream}, {"durable", &a.Durable},
		{"amqp-url", &a.AMQPURL}, {"queue", &a.Queue},
		{"sqs-endpoint", &a.SQSEndpoint}, {"queue-url", &a.QueueURL},
	}
}

// Flags defines a flag on fs for each field of a, for a process that Args
// started.
func (a *Address) Flags(fs *flag.FlagSet) {
	for _, f := range a.flags() {
		fs.StringVar(f.v, f.name, *f.v, "the broker's "+f.name)
	}
}

// Args are the flags of a's fields that are set.
func (a Address) Args() []string {
	var args []string
	for _, f := range a.flags() {
		if *f.v != "" {
			args = append(args, "--"+f.name, *f.v)
		}
	}
	return args
}

// KafkaClient returns a client of a's brokers with opts.
func (a Address) KafkaClient(opts ...kgo.Opt) (*kgo.Client, error) {
	return kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(strings.Split(a.Brokers, ",")...)}, opts...)...)
}

// InboxKafkaClient returns the client inboxkafka.New takes: a member of
// a's group, consuming a's topic from its start when the group has no
// offsets, with inboxkafka.ClientOpts, timings g, and opts.
func (a Address) InboxKafkaClient(g KafkaTimings, opts ...kgo.Opt) (*kgo.Client, error) {
	return a.KafkaClient(append(append(inboxkafka.ClientOpts(), a.groupOpts(g)...), opts...)...)
}

// groupOpts make a client a member of a's group, with timings g.
func (a Address) groupOpts(g KafkaTimings) []kgo.Opt {
	return append([]kgo.Opt{
		kgo.ConsumerGroup(a.Group),
		kgo.ConsumeTopics(a.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	}, g.opts()...)
}
