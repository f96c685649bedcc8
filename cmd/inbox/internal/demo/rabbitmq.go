package demo

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txinbox/inbox/inboxrabbit"
	"github.com/txinbox/inbox/internal/testdb"
)

// DefaultAMQPURL is the local RabbitMQ the demo runs on with --transport
// rabbitmq.
const DefaultAMQPURL = "amqp://guest:guest@127.0.0.1:5672/"

// headerIndex carries a record's place in the produce order on RabbitMQ,
// which numbers nothing: it is where the scenario's crashes fall.
const headerIndex = "demo-index"

// rabbitBroker is a fanout exchange of the run on a RabbitMQ server, with
// a queue per strategy and consumer bound to it, so that each reads every
// record. The hand-written consumers take at most batchSize deliveries
// unacknowledged (Qos), and a crash closes their connection: the broker
// puts what they held back at the head of their queue, as a Kafka consumer
// group restarts from its committed offset.
type rabbitBroker struct {
	url      string
	exchange string
	conn     *amqp.Connection
	ch       *amqp.Channel
	queues   []string
}

func newRabbit(amqpURL string) (*rabbitBroker, error) {
	if amqpURL == "" {
		amqpURL = DefaultAMQPURL
	}
	r := &rabbitBroker{url: amqpURL, exchange: "inbox-demo." + testdb.RandomSuffix()}
	var err error
	r.conn, err = r.dial()
	if err != nil {
		return nil, fmt.Errorf("demo: cannot reach RabbitMQ at %s: %w", redacted(amqpURL), err)
	}
	if r.ch, err = r.conn.Channel(); err == nil {
		err = r.ch.ExchangeDeclare(r.exchange, amqp.ExchangeFanout, false, false, false, false, nil)
	}
	if err == nil {
		for _, strategy := range Strategies {
			for _, consumer := range consumers {
				q := r.queue(strategy, consumer)
				r.queues = append(r.queues, q)
				// Deleted at the end, or by the server after ten idle
				// minutes if the demo dies first.
				if _, err = r.ch.QueueDeclare(q, false, false, false, false, amqp.Table{"x-expires": int32(10 * 60 * 1000)}); err != nil {
					break
				}
				if err = r.ch.QueueBind(q, "", r.exchange, false, nil); err != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
	}
	if err != nil {
		r.close()
		return nil, fmt.Errorf("demo: declare the queues on RabbitMQ at %s: %w", redacted(amqpURL), err)
	}
	return r, nil
}

func (r *rabbitBroker) dial() (*amqp.Connection, error) {
	return amqp.DialConfig(r.url, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
}

// redacted is u without its password.
func redacted(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(unparsable AMQP URL)"
	}
	return p.Redacted()
}

func (r *rabbitBroker) queue(strategy, consumer string) string {
	return r.exchange + "." + strategy + "." + consumer
}

func (r *rabbitBroker) kind() string { return "RabbitMQ at " + redacted(r.url) }

// produce publishes the records in order, each confirmed by the broker.
func (r *rabbitBroker) produce(ctx context.Context, records []event) error {
	if err := r.ch.Confirm(false); err != nil {
		return fmt.Errorf("demo: confirm mode: %w", err)
	}
	for i, e := range records {
		c, err := r.ch.PublishWithDeferredConfirmWithContext(ctx, r.exchange, "", false, false, amqp.Publishing{
			Body:    e.body(),
			Headers: amqp.Table{inboxrabbit.HeaderEventID: e.ID, headerIndex: int32(i)},
		})
		if err != nil {
			return fmt.Errorf("demo: publish: %w", err)
		}
		if ok, err := c.WaitContext(ctx); err != nil || !ok {
			return fmt.Errorf("demo: publish: not confirmed: %v", err)
		}
	}
	return nil
}

// subscribe starts a life on the strategy's queue, on a connection of its
// own, which a crash closes.
func (r *rabbitBroker) subscribe(_ context.Context, strategy, consumer string) (subscription, error) {
	conn, err := r.dial()
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Qos(batchSize, 0, false)
	}
	var deliveries <-chan amqp.Delivery
	if err == nil {
		deliveries, err = ch.Consume(r.queue(strategy, consumer), "", false, false, false, false, nil)
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	return &rabbitSub{conn: conn, deliveries: deliveries}, nil
}

func (r *rabbitBroker) inboxArgs(_ context.Context, consumer string) ([]string, error) {
	return []string{"--amqp-url", r.url, "--queue", r.queue("inbox", consumer)}, nil
}

func (r *rabbitBroker) close() {
	if r.ch != nil && !r.ch.IsClosed() {
		for _, q := range r.queues {
			_, _ = r.ch.QueueDelete(q, false, false, false)
		}
		_ = r.ch.ExchangeDelete(r.exchange, false, false)
	}
	if r.conn != nil {
		r.conn.Close()
	}
}

// rabbitSub is a life of a hand-written consumer on its queue.
type rabbitSub struct {
	conn       *amqp.Connection
	deliveries <-chan amqp.Delivery
}

func (s *rabbitSub) poll(ctx context.Context) ([]*record, error) {
	t := time.NewTimer(500 * time.Millisecond)
	defer t.Stop()
	var out []*record
	for len(out) < batchSize {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
			return out, nil
		case d, ok := <-s.deliveries:
			if !ok {
				return nil, errors.New("the channel closed")
			}
			r, err := rabbitRecord(d)
			if err != nil {
				return nil, err
			}
			out = append(out, r)
		}
	}
	return out, nil
}

// rabbitRecord reads a delivery. Its key for offset-key is its delivery
// tag, which numbers the deliveries of one channel from 1.
func rabbitRecord(d amqp.Delivery) (*record, error) {
	index, ok := d.Headers[headerIndex].(int32)
	if !ok {
		return nil, fmt.Errorf("demo: a delivery without its %s header", headerIndex)
	}
	id, _ := d.Headers[inboxrabbit.HeaderEventID].(string)
	return &record{
		index: int(index),
		key:   "delivery-tag/" + strconv.FormatUint(d.DeliveryTag, 10),
		id:    id,
		body:  d.Body,
		raw:   d,
	}, nil
}

// ack acknowledges each record on the channel it came on. The connection
// writes the acks in order, before anything it sends later, the close of
// a crash included.
func (s *rabbitSub) ack(_ context.Context, recs []*record) error {
	for _, r := range recs {
		if err := r.raw.(amqp.Delivery).Ack(false); err != nil {
			return err
		}
	}
	return nil
}

func (s *rabbitSub) close() { s.conn.Close() }
