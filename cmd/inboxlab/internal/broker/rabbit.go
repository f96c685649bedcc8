package broker

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txinbox/inbox/inboxrabbit"
	"github.com/txinbox/inbox/internal/tcpproxy"
	"github.com/txinbox/inbox/internal/transportkit"
	"github.com/txinbox/inbox/outbox"
)

// rabbitDialTimeout bounds a dial, so that a server that does not answer
// fails a run quickly.
const rabbitDialTimeout = 5 * time.Second

// queueExpiry is how long an idle queue of the lab lives: a run deletes
// its queues at the end, and the server deletes them if the run died
// first.
const queueExpiry = 10 * time.Minute

// Rabbit is a RabbitMQ server, reached by URL.
type Rabbit struct {
	url string
	// consumerURL is where consumers connect: url, or the proxy in front
	// of it.
	consumerURL string
	proxy       *tcpproxy.Proxy
	conn        *amqp.Connection
	// producer sends the topics' messages.
	producer *RabbitProducer

	// queues and exchanges are those declared.
	queues, exchanges created

	mu sync.Mutex
	// admin declares and deletes, under mu.
	admin *amqp.Channel
	// channels are the outbox sinks', which Close closes.
	channels []*amqp.Channel
}

// OpenRabbit connects to the RabbitMQ at amqpURL (DefaultAMQPURL if
// empty).
// With proxy, its consumers (Topic.Address, Topic.Subscribe) connect
// through a TCP proxy in this process, which CutConsumers cuts.
func OpenRabbit(amqpURL string, proxy bool) (*Rabbit, error) {
	if amqpURL == "" {
		amqpURL = DefaultAMQPURL
	}
	r := &Rabbit{url: amqpURL, consumerURL: amqpURL}
	var err error
	if r.conn, err = dialRabbit(amqpURL); err != nil {
		return nil, fmt.Errorf("cannot reach RabbitMQ at %s: %w", Redacted(amqpURL), err)
	}
	if r.admin, err = r.conn.Channel(); err == nil {
		r.producer, err = r.NewProducer()
	}
	if err == nil && proxy {
		err = r.startProxy()
	}
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("RabbitMQ at %s: %w", Redacted(amqpURL), err)
	}
	return r, nil
}

func dialRabbit(amqpURL string) (*amqp.Connection, error) {
	return amqp.DialConfig(amqpURL, amqp.Config{Dial: amqp.DefaultDial(rabbitDialTimeout)})
}

// RabbitDial is the inboxrabbit.DialFunc of the RabbitMQ at url.
func RabbitDial(amqpURL string) inboxrabbit.DialFunc {
	return func(context.Context) (*amqp.Connection, error) { return dialRabbit(amqpURL) }
}

// startProxy puts the proxy in front of the server for the consumers.
func (r *Rabbit) startProxy() error {
	u, err := url.Parse(r.url)
	if err != nil {
		return err
	}
	if r.proxy, err = tcpproxy.Start(u.Host); err != nil {
		return err
	}
	u.Host = r.proxy.Addr()
	r.consumerURL = u.String()
	return nil
}

// Transport is TransportRabbitMQ.
func (r *Rabbit) Transport() string { return TransportRabbitMQ }

// Kind says which server it is.
func (r *Rabbit) Kind() string { return "RabbitMQ at " + Redacted(r.url) }

// DeclareQueue declares the durable queue name, which the server deletes
// after queueExpiry idle, and Close at once.
func (r *Rabbit) DeclareQueue(name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := r.admin.QueueDeclare(name, true, false, false, false, amqp.Table{"x-expires": int32(queueExpiry.Milliseconds())}); err != nil {
		return fmt.Errorf("declare queue %s: %w", name, err)
	}
	r.queues.add(name)
	return nil
}

// NewTopic declares the fanout exchange name, and a queue per
// subscription, <name>.<subscription>, bound to it.
func (r *Rabbit) NewTopic(_ context.Context, name string, c *TopicConfig) (Topic, error) {
	t := &rabbitTopic{r: r, exchange: name}
	r.mu.Lock()
	err := r.admin.ExchangeDeclare(name, amqp.ExchangeFanout, false, false, false, false, nil)
	r.mu.Unlock()
	if err == nil {
		r.exchanges.add(name)
	}
	if err != nil {
		return nil, fmt.Errorf("declare exchange %s: %w", name, err)
	}
	if c != nil {
		for _, sub := range c.Subscriptions {
			q := t.queue(sub)
			if err := r.DeclareQueue(q); err != nil {
				return nil, err
			}
			r.mu.Lock()
			err := r.admin.QueueBind(q, "", name, false, nil)
			r.mu.Unlock()
			if err != nil {
				return nil, fmt.Errorf("bind queue %s: %w", q, err)
			}
			t.queues = append(t.queues, q)
		}
	}
	return t, nil
}

// RabbitProducer is a channel in confirm mode.
type RabbitProducer struct {
	r  *Rabbit
	mu sync.Mutex
	ch *amqp.Channel
}

// NewProducer opens a channel of its own for sending.
func (r *Rabbit) NewProducer() (*RabbitProducer, error) {
	p := &RabbitProducer{r: r}
	if err := p.open(); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *RabbitProducer) open() error {
	ch, err := p.r.conn.Channel()
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		return fmt.Errorf("open a producer channel: %w", err)
	}
	p.ch = ch
	return nil
}

// Send publishes msgs, persistent, to exchange with routing key key (the
// default exchange "" and a queue's name send to that queue), all at once,
// and waits for the broker's confirms. A channel that closed is opened
// again.
func (p *RabbitProducer) Send(ctx context.Context, exchange, key string, msgs ...Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ch.IsClosed() {
		if err := p.open(); err != nil {
			return err
		}
	}
	confirms := make([]*amqp.DeferredConfirmation, len(msgs))
	for i, m := range msgs {
		headers := amqp.Table{HeaderEventID: m.ID}
		for k, v := range m.Headers {
			headers[k] = v
		}
		c, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, false, false, amqp.Publishing{
			Body: m.Body, DeliveryMode: amqp.Persistent, Headers: headers,
		})
		if err != nil {
			return err
		}
		confirms[i] = c
	}
	for _, c := range confirms {
		ok, err := c.WaitContext(ctx)
		if err != nil {
			return err
		}
		if !ok {
			return errors.New("the broker refused a message")
		}
	}
	return nil
}

// Subscribe starts a consumer of queue, on a connection of its own, which
// holds at most c.Prefetch deliveries unacknowledged.
func (r *Rabbit) Subscribe(queue string, c *PollConfig) (Poller, error) {
	pc := c.withDefaults()
	conn, err := dialRabbit(r.consumerURL)
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Qos(pc.Prefetch, 0, false)
	}
	var deliveries <-chan amqp.Delivery
	if err == nil {
		deliveries, err = ch.Consume(queue, "", false, false, false, false, nil)
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("consume %s: %w", queue, err)
	}
	return &rabbitPoller{conn: conn, deliveries: deliveries, c: pc}, nil
}

// CutConsumers closes every consumer connection at once, from outside
// the consumers, as a broker restart or a network failure would. It
// reports false, and does nothing, without the proxy.
func (r *Rabbit) CutConsumers() bool {
	if r.proxy == nil {
		return false
	}
	r.proxy.Cut()
	return true
}

// Close deletes the queues and exchanges declared, and closes the
// connections.
func (r *Rabbit) Close() { r.Cleanup() }

// Cleanup is Close, and says what it deleted.
func (r *Rabbit) Cleanup() []string {
	var said []string
	if r.proxy != nil {
		r.proxy.Close()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ch := range r.channels {
		_ = ch.Close()
	}
	if r.admin != nil && !r.admin.IsClosed() {
		for _, q := range r.queues.take() {
			_, err := r.admin.QueueDelete(q, false, false, false)
			said = append(said, deleted("queue", q, err))
		}
		for _, x := range r.exchanges.take() {
			said = append(said, deleted("exchange", x, r.admin.ExchangeDelete(x, false, false)))
		}
	}
	if r.conn != nil {
		r.conn.Close()
	}
	return said
}

// rabbitTopic is a fanout exchange, whose subscriptions are queues bound
// to it.
type rabbitTopic struct {
	r        *Rabbit
	exchange string
	queues   []string
}

func (t *rabbitTopic) queue(sub string) string { return t.exchange + "." + sub }

func (t *rabbitTopic) Name() string { return t.exchange }

func (t *rabbitTopic) Send(ctx context.Context, msgs ...Message) error {
	return t.r.producer.Send(ctx, t.exchange, "", msgs...)
}

func (t *rabbitTopic) Subscribe(_ context.Context, sub string, c *PollConfig) (Poller, error) {
	return t.r.Subscribe(t.queue(sub), c)
}

func (t *rabbitTopic) Address(sub string) Address {
	return Address{Transport: TransportRabbitMQ, AMQPURL: t.r.consumerURL, Queue: t.queue(sub)}
}

func (t *rabbitTopic) Stored(context.Context) (int, error) {
	if len(t.queues) == 0 {
		return 0, fmt.Errorf("exchange %s has no queue to count", t.exchange)
	}
	t.r.mu.Lock()
	defer t.r.mu.Unlock()
	q, err := t.r.admin.QueueDeclarePassive(t.queues[0], true, false, false, false, nil)
	if err != nil {
		return 0, fmt.Errorf("inspect queue %s: %w", t.queues[0], err)
	}
	return q.Messages, nil
}

// OutboxSink is inboxrabbit's sink to the exchange, on a channel of its
// own.
func (t *rabbitTopic) OutboxSink() (outbox.Sink, error) {
	ch, err := t.r.conn.Channel()
	if err != nil {
		return nil, err
	}
	t.r.mu.Lock()
	t.r.channels = append(t.r.channels, ch)
	t.r.mu.Unlock()
	return inboxrabbit.NewOutboxSink(ch, &inboxrabbit.OutboxSinkConfig{Exchange: t.exchange})
}

// rabbitPoller consumes a queue.
type rabbitPoller struct {
	conn       *amqp.Connection
	deliveries <-chan amqp.Delivery
	c          PollConfig
}

// Poll waits up to Wait for a delivery and takes it with those already
// waiting behind it, and those that arrive within BatchWait of it, up to
// Batch, as inboxrabbit batches.
func (p *rabbitPoller) Poll(ctx context.Context) ([]*Delivery, error) {
	t := time.NewTimer(p.c.Wait)
	defer t.Stop()
	var out []*Delivery
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.C:
		return nil, nil
	case d, ok := <-p.deliveries:
		if !ok {
			return nil, errClosed
		}
		out = append(out, rabbitDelivery(d))
	}
	transportkit.Fill(ctx, p.deliveries, p.c.Batch-1, p.c.BatchWait, nil, func(d amqp.Delivery) {
		out = append(out, rabbitDelivery(d))
	})
	return out, nil
}

func rabbitDelivery(d amqp.Delivery) *Delivery {
	id, _ := d.Headers[HeaderEventID].(string)
	return &Delivery{ID: id, Body: d.Body, raw: d}
}

// Ack acknowledges each delivery on the channel it came on. The
// connection writes the acks in order, before anything it sends later,
// the close of a crash included. Deliveries of one channel, in the order
// they were polled, are acknowledged with one multiple ack of the last, as
// inboxrabbit acknowledges a batch: every caller acks what it polled, or
// the first of it, before it polls again, so that ack names exactly ds.
func (p *rabbitPoller) Ack(_ context.Context, ds []*Delivery) error {
	if len(ds) > 1 && oneChannelInOrder(ds) {
		return ds[len(ds)-1].raw.(amqp.Delivery).Ack(true)
	}
	for _, d := range ds {
		if err := d.raw.(amqp.Delivery).Ack(false); err != nil {
			return err
		}
	}
	return nil
}

// oneChannelInOrder reports whether ds came on one channel with rising
// delivery tags.
func oneChannelInOrder(ds []*Delivery) bool {
	first := ds[0].raw.(amqp.Delivery)
	last := first.DeliveryTag
	for _, d := range ds[1:] {
		r := d.raw.(amqp.Delivery)
		if r.Acknowledger != first.Acknowledger || r.DeliveryTag <= last {
			return false
		}
		last = r.DeliveryTag
	}
	return true
}

// Close closes the connection: the broker puts what the consumer held back
// at the head of its queue.
func (p *rabbitPoller) Close() { p.conn.Close() }
