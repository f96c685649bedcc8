package inboxrabbit_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txinbox/inbox/inboxpgx/inboxpgxtest"
	"github.com/txinbox/inbox/inboxrabbit"
	"github.com/txinbox/inbox/inboxtransport"
	"github.com/txinbox/inbox/inboxtransport/transporttest"
	"github.com/txinbox/inbox/internal/testdb"
	"github.com/txinbox/inbox/outbox"
)

// TestTransport runs the transport conformance suite on the machine's
// RabbitMQ: a quorum queue per case (its x-delivery-count counts
// deliveries), a classic single-active-consumer queue where order is
// asked for.
func TestTransport(t *testing.T) { transporttest.Exercise(t, transport) }

var transport = inboxpgxtest.Transport("rabbitmq", transporttest.Features{Ordered: true, ProcessCrash: true, MaxCrashes: inboxtransport.DefaultMaxCrashes}, newQueue, openQueue)

// queue is a queue of its own on the machine's broker.
type queue struct {
	url, name string
	conn      *amqp.Connection
}

func newQueue(t testing.TB, opts transporttest.QueueOptions) transporttest.Queue[pgx.Tx] {
	name := "inboxtest." + testdb.RandomSuffix()
	q, err := openQueue(testdb.AMQPURL() + "|" + name)
	testdb.Require(t, "RabbitMQ at "+testdb.AMQPURL(), err)
	conn := q.(*queue).conn
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	args := amqp.Table{"x-queue-type": "quorum"}
	if opts.Ordered {
		args = amqp.Table{"x-single-active-consumer": true}
	}
	if _, err := ch.QueueDeclare(name, true, false, false, false, args); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ch, err := conn.Channel()
		if err == nil {
			_, err = ch.QueueDelete(name, false, false, false)
			ch.Close()
		}
		if err != nil {
			t.Logf("delete queue %s: %v", name, err)
		}
	})
	return q
}

// openQueue opens the queue named "url|queue".
func openQueue(name string) (transporttest.Queue[pgx.Tx], error) {
	u, q, ok := strings.Cut(name, "|")
	if !ok {
		return nil, errors.New("inboxrabbit test: malformed queue name " + name)
	}
	conn, err := amqp.Dial(u)
	if err != nil {
		return nil, err
	}
	return &queue{url: u, name: q, conn: conn}, nil
}

func (q *queue) Name() string { return q.url + "|" + q.name }

func (q *queue) Publish(ctx context.Context, msgs ...transporttest.Message) error {
	ch, err := q.conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		return err
	}
	confs := make([]*amqp.DeferredConfirmation, 0, len(msgs))
	for _, m := range msgs {
		pub := amqp.Publishing{Body: m.Body, DeliveryMode: amqp.Persistent}
		if m.ID != "" {
			pub.Headers = amqp.Table{outbox.HeaderEventID: m.ID}
		}
		conf, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", q.name, true, false, pub)
		if err != nil {
			return err
		}
		confs = append(confs, conf)
	}
	for _, conf := range confs {
		ok, err := conf.WaitContext(ctx)
		if err != nil {
			return err
		}
		if !ok {
			return errors.New("inboxrabbit test: the broker refused a publish")
		}
	}
	return nil
}

func (q *queue) Consumer(opts transporttest.ConsumerOptions[pgx.Tx]) (transporttest.Runner, error) {
	cfg := &inboxrabbit.Config{
		Queue:            q.name,
		Consumer:         opts.Consumer,
		Key:              opts.Key,
		Ordered:          opts.Ordered,
		ReconnectBackoff: 50 * time.Millisecond,
		Settings:         opts.Settings,
	}
	if opts.Ordered {
		cfg.Workers, cfg.MaxBatch = 1, 1
	}
	c, err := inboxrabbit.New(inboxrabbit.DialURL(q.url, amqp.Config{}), opts.Client, opts.Handler, cfg)
	if err != nil {
		return nil, err
	}
	if opts.ReceiveAhead != nil {
		inboxrabbit.ReceiveAhead(c, *opts.ReceiveAhead)
	}
	return c, nil
}

// Depth is how many messages the queue holds ready: those delivered and
// not acknowledged go back to it when their channel closes.
func (q *queue) Depth(context.Context) (int, error) {
	ch, err := q.conn.Channel()
	if err != nil {
		return 0, err
	}
	defer ch.Close()
	info, err := ch.QueueDeclarePassive(q.name, true, false, false, false, nil)
	if err != nil {
		return 0, err
	}
	return info.Messages, nil
}

// BenchmarkReceiveAhead measures the consumer with its next batch taken
// while the current one commits, and without (see transporttest.Benchmark).
func BenchmarkReceiveAhead(b *testing.B) { transporttest.Benchmark(b, transport) }
