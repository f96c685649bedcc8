package broker_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox/cmd/inboxlab/internal/broker"
	"github.com/txinbox/inbox/cmd/inboxlab/internal/broker/brokertest"
	"github.com/txinbox/inbox/internal/testdb"
	"github.com/txinbox/inbox/outbox"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// localNATS is the machine's NATS server with JetStream.
const localNATS = "nats://127.0.0.1:4222"

// open opens the broker c names, for the test's life.
func open(t *testing.T, c *broker.Config) broker.Broker {
	t.Helper()
	switch {
	case c.Transport == broker.TransportRabbitMQ:
		brokertest.RequireServer(t, "RabbitMQ", broker.DefaultAMQPURL)
	case c.NATSURL != "":
		brokertest.RequireServer(t, "NATS", c.NATSURL)
	}
	b, err := broker.Open(c)
	require.NoError(t, err)
	t.Cleanup(b.Close)
	return b
}

// poll polls p until it has n deliveries, and acks them unless told not
// to.
func poll(t *testing.T, p broker.Poller, n int, ack bool) []*broker.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got []*broker.Delivery
	for len(got) < n {
		ds, err := p.Poll(ctx)
		require.NoError(t, err, "%d of %d deliveries", len(got), n)
		got = append(got, ds...)
		if ack {
			require.NoError(t, p.Ack(ctx, ds))
		}
	}
	require.Len(t, got, n)
	return got
}

func name(t *testing.T) string { return "inboxlab-test-" + testdb.RandomSuffix() }

// Every broker but SQS (TestSQSTopic), in process or real, does the same
// with a topic: it holds
// what was sent, each subscription gets every message in order with its
// id, headers and a key of the broker's, a consumer that closes without
// acking gets them again, an outbox sink reaches the topic, and the
// address names what a consumer process needs.
func TestTopic(t *testing.T) {
	t.Parallel()
	real := func() string { // a "real" Kafka cluster: a kfake the test starts
		k, err := broker.OpenKafka("", broker.KafkaTimings{}, nil)
		require.NoError(t, err)
		t.Cleanup(k.Close)
		return k.Brokers()
	}
	for _, tc := range []struct {
		name string
		c    *broker.Config
	}{
		{"kafka", &broker.Config{Transport: broker.TransportKafka, Kafka: broker.KafkaTimings{Session: time.Second, Heartbeat: 100 * time.Millisecond}}},
		{"kafka-brokers", &broker.Config{Transport: broker.TransportKafka, Brokers: real()}},
		{"nats", &broker.Config{Transport: broker.TransportNATS}},
		{"nats-url", &broker.Config{Transport: broker.TransportNATS, NATSURL: localNATS}},
		{"rabbitmq", &broker.Config{Transport: broker.TransportRabbitMQ}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := open(t, tc.c)
			require.Equal(t, tc.c.Transport, b.Transport())
			subs := []string{"a", "b"}
			tp, err := b.NewTopic(ctx, name(t), &broker.TopicConfig{Subscriptions: subs, Redelivery: time.Second})
			require.NoError(t, err)
			var msgs []broker.Message
			for i := range 3 {
				msgs = append(msgs, broker.Message{ID: fmt.Sprint("id-", i), Key: "k", Body: fmt.Appendf(nil, "body %d", i), Headers: map[string]string{"n": fmt.Sprint(i)}})
			}
			require.NoError(t, tp.Send(ctx, msgs...))
			n, err := tp.Stored(ctx)
			require.NoError(t, err)
			require.Equal(t, 3, n)

			for _, sub := range subs {
				p, err := tp.Subscribe(ctx, sub, &broker.PollConfig{Batch: 10, Wait: 200 * time.Millisecond, ConfirmAcks: true})
				require.NoError(t, err)
				// Closed without acking: delivered again.
				for i, d := range poll(t, p, 3, false) {
					require.Equal(t, msgs[i].ID, d.ID, "%s", sub)
				}
				p.Close()
				p, err = tp.Subscribe(ctx, sub, &broker.PollConfig{Batch: 10, Wait: 200 * time.Millisecond})
				require.NoError(t, err)
				got := poll(t, p, 3, true)
				for i, d := range got {
					require.Equal(t, msgs[i].ID, d.ID)
					require.Equal(t, string(msgs[i].Body), string(d.Body))
					require.Equal(t, fmt.Sprint(i), d.Header("n"))
					require.Equal(t, msgs[i].ID, d.Header(broker.HeaderEventID))
					require.NotEmpty(t, d.Key())
				}
				require.NotEqual(t, got[0].Key(), got[1].Key())
				p.Close()
			}

			// The outbox's sink reaches the topic; Read takes what comes next.
			sink, err := tp.OutboxSink()
			require.NoError(t, err)
			errs := sink.Publish(ctx, []outbox.Record{{ID: "from-outbox", Topic: tp.Name(), Key: []byte("k"),
				Headers: map[string]string{outbox.HeaderEventID: "from-outbox"}, Payload: []byte(`{"x":1}`), CreatedAt: time.Now()}})
			require.NoError(t, errs[0])
			rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			var read []string
			require.NoError(t, broker.Read(rctx, tp, subs[0], 1, func(d *broker.Delivery) error {
				read = append(read, d.ID)
				return nil
			}))
			require.Equal(t, []string{"from-outbox"}, read)

			// The address, through the command line of a process.
			a := tp.Address(subs[0])
			require.Equal(t, b.Transport(), a.Transport)
			var parsed broker.Address
			fs := flag.NewFlagSet("consumer", flag.ContinueOnError)
			parsed.Flags(fs)
			require.NoError(t, fs.Parse(a.Args()))
			require.Equal(t, a, parsed)
			switch a.Transport {
			case broker.TransportKafka:
				require.NotEmpty(t, a.Brokers+a.Topic+a.Group)
				cl, err := a.InboxKafkaClient(tc.c.Kafka)
				require.NoError(t, err)
				cl.Close()
			case broker.TransportNATS:
				_, js, err := broker.ConnectNATS(a.NATSURL)
				require.NoError(t, err)
				_, err = js.Consumer(ctx, a.Stream, a.Durable)
				require.NoError(t, err)
			case broker.TransportRabbitMQ:
				conn, err := broker.RabbitDial(a.AMQPURL)(ctx)
				require.NoError(t, err)
				conn.Close()
			}
		})
	}
}

// Close deletes what the run created on a real broker.
func TestCloseDeletes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("nats", func(t *testing.T) {
		t.Parallel()
		brokertest.RequireServer(t, "NATS", localNATS)
		b, err := broker.OpenNATS(localNATS)
		require.NoError(t, err)
		tp, err := b.NewTopic(ctx, name(t), nil)
		require.NoError(t, err)
		stream := tp.Address("").Stream
		b.Close()
		_, js, err := broker.ConnectNATS(localNATS)
		require.NoError(t, err)
		_, err = js.Stream(ctx, stream)
		require.ErrorIs(t, err, jetstream.ErrStreamNotFound)
	})
	t.Run("rabbitmq", func(t *testing.T) {
		t.Parallel()
		brokertest.RequireServer(t, "RabbitMQ", broker.DefaultAMQPURL)
		b, err := broker.OpenRabbit("", false)
		require.NoError(t, err)
		tp, err := b.NewTopic(ctx, name(t), &broker.TopicConfig{Subscriptions: []string{"a"}})
		require.NoError(t, err)
		queue := tp.Address("a").Queue
		b.Close()
		conn, err := amqp.Dial(broker.DefaultAMQPURL)
		require.NoError(t, err)
		defer conn.Close()
		ch, err := conn.Channel()
		require.NoError(t, err)
		_, err = ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		var ae *amqp.Error
		require.True(t, errors.As(err, &ae) && ae.Code == amqp.NotFound, "queue %s was not deleted: %v", queue, err)
	})
	t.Run("kafka-brokers", func(t *testing.T) {
		t.Parallel()
		cluster, err := broker.OpenKafka("", broker.KafkaTimings{}, nil)
		require.NoError(t, err)
		defer cluster.Close()
		b, err := broker.OpenKafka(cluster.Brokers(), broker.KafkaTimings{}, nil)
		require.NoError(t, err)
		topic := name(t)
		_, err = b.NewTopic(ctx, topic, nil)
		require.NoError(t, err)
		b.Close()
		// Created again: the first was deleted.
		_, err = cluster.NewTopic(ctx, topic, nil)
		require.NoError(t, err)
	})
}

// The faults chaos injects: a failed offset commit, a NATS server
// restart, RabbitMQ's consumer connections cut (and TestSQSFaults).
func TestFaults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("kafka", func(t *testing.T) {
		t.Parallel()
		k, err := broker.OpenKafka("", broker.KafkaTimings{}, nil)
		require.NoError(t, err)
		defer k.Close()
		tp, err := k.NewTopic(ctx, name(t), nil)
		require.NoError(t, err)
		require.NoError(t, tp.Send(ctx, broker.Message{ID: "1"}, broker.Message{ID: "2"}))
		p, err := tp.Subscribe(ctx, "a", nil)
		require.NoError(t, err)
		defer p.Close()
		ds := poll(t, p, 2, false)
		require.True(t, k.FailCommit(tp.Address("a").Group, kerr.RebalanceInProgress.Code))
		require.ErrorIs(t, p.Ack(ctx, ds[:1]), kerr.RebalanceInProgress)
		require.NoError(t, p.Ack(ctx, ds[1:]), "one failure, served once")
		require.True(t, k.FailCommit(tp.Address("a").Group, kerr.IllegalGeneration.Code))
		k.Calm()
		require.NoError(t, p.Ack(ctx, ds), "calmed")
		require.True(t, k.FailCommit(tp.Address("a").Group, kerr.IllegalGeneration.Code))
		require.NoError(t, broker.Ack(ctx, p, ds), "committed again once the group settled")
		require.True(t, k.FailCommit(tp.Address("a").Group, kerr.UnknownTopicOrPartition.Code))
		require.ErrorIs(t, broker.Ack(ctx, p, ds), kerr.UnknownTopicOrPartition, "only a rebalance is waited out")

		real, err := broker.OpenKafka(k.Brokers(), broker.KafkaTimings{}, nil)
		require.NoError(t, err)
		defer real.Close()
		require.False(t, real.FailCommit("a", kerr.RebalanceInProgress.Code), "no faults on a real cluster")
	})
	t.Run("nats", func(t *testing.T) {
		t.Parallel()
		n, err := broker.OpenNATS("")
		require.NoError(t, err)
		defer n.Close()
		tp, err := n.NewTopic(ctx, name(t), nil)
		require.NoError(t, err)
		require.NoError(t, tp.Send(ctx, broker.Message{ID: "1"}))
		require.True(t, n.Restart())
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		require.NoError(t, tp.Send(sctx, broker.Message{ID: "2"}), "the broker's connection came back")
		stored, err := tp.Stored(sctx)
		require.NoError(t, err)
		require.Equal(t, 2, stored, "the stream survived on disk")
	})
	t.Run("rabbitmq", func(t *testing.T) {
		t.Parallel()
		brokertest.RequireServer(t, "RabbitMQ", broker.DefaultAMQPURL)
		r, err := broker.OpenRabbit("", true)
		require.NoError(t, err)
		defer r.Close()
		tp, err := r.NewTopic(ctx, name(t), &broker.TopicConfig{Subscriptions: []string{"a"}})
		require.NoError(t, err)
		p, err := tp.Subscribe(ctx, "a", &broker.PollConfig{Wait: 50 * time.Millisecond})
		require.NoError(t, err)
		defer p.Close()
		require.True(t, r.CutConsumers())
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		for {
			if _, err = p.Poll(pctx); err != nil {
				break
			}
		}
		require.ErrorContains(t, err, "closed", "the consumer's connection was cut")

		plain, err := broker.OpenRabbit("", false)
		require.NoError(t, err)
		defer plain.Close()
		require.False(t, plain.CutConsumers(), "no proxy")
	})
}

// An SQS topic is a queue, with the redelivery as its visibility timeout,
// whose messages carry their id as an attribute, and which Close deletes.
// The lab consumes it only through inboxsqs.
func TestSQSTopic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := broker.OpenSQS("")
	tp, err := s.NewTopic(ctx, name(t), &broker.TopicConfig{Redelivery: 3 * time.Second})
	require.NoError(t, err)
	require.NoError(t, tp.Send(ctx, broker.Message{ID: "id-1", Body: []byte("one"), Headers: map[string]string{"n": "1"}}))
	a := tp.Address("any")
	require.Equal(t, broker.TransportSQS, a.Transport)
	require.Equal(t, tp.Name(), a.QueueURL)
	cl := broker.SQSClient(a.SQSEndpoint)
	attrs, err := cl.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(a.QueueURL), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameVisibilityTimeout}})
	require.NoError(t, err)
	require.Equal(t, "3", attrs.Attributes[string(types.QueueAttributeNameVisibilityTimeout)])
	out, err := cl.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(a.QueueURL), WaitTimeSeconds: 1, MessageAttributeNames: []string{"All"}})
	require.NoError(t, err)
	require.Len(t, out.Messages, 1)
	m := out.Messages[0]
	require.Equal(t, "one", aws.ToString(m.Body))
	require.Equal(t, "id-1", aws.ToString(m.MessageAttributes[broker.HeaderEventID].StringValue))
	require.Equal(t, "1", aws.ToString(m.MessageAttributes["n"].StringValue))
	_, err = tp.Subscribe(ctx, "any", nil)
	require.ErrorContains(t, err, "only through inboxsqs")
	s.Close()
	_, err = cl.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(a.QueueURL)})
	require.Error(t, err, "the queue was deleted")
}

// goaws fails requests on demand. Its state is the process's, so this
// test runs alone: no other test's request takes the failures.
func TestSQSFaults(t *testing.T) {
	ctx := context.Background()
	s := broker.OpenSQS("")
	defer s.Close()
	tp, err := s.NewTopic(ctx, name(t), nil)
	require.NoError(t, err)
	cl := broker.SQSClient(tp.Address("").SQSEndpoint)
	receive := func() error {
		_, err := cl.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(tp.Name())})
		return err
	}
	// The client tries a request three times.
	require.True(t, s.FailNext("ReceiveMessage", 3))
	require.ErrorContains(t, receive(), "injected failure")
	require.NoError(t, receive(), "three failures, served once")
	require.True(t, s.FailNext("ReceiveMessage", 3))
	s.Calm()
	require.NoError(t, receive(), "calmed")
	require.False(t, broker.OpenSQS("http://127.0.0.1:1").FailNext("ReceiveMessage", 1), "no faults on a real endpoint")
}

// A broker that cannot be reached says so, without the password.
func TestUnreachable(t *testing.T) {
	t.Parallel()
	_, err := broker.OpenRabbit("amqp://guest:hunter2@127.0.0.1:1/", false)
	require.ErrorContains(t, err, "cannot reach RabbitMQ at amqp://guest:xxxxx@127.0.0.1:1/")
	require.NotContains(t, err.Error(), "hunter2")
	_, err = broker.OpenNATS("nats://127.0.0.1:1")
	require.ErrorContains(t, err, "cannot reach NATS at nats://127.0.0.1:1")
	_, err = broker.Open(&broker.Config{Transport: "kinesis"})
	require.ErrorContains(t, err, `transport "kinesis"`)
}
