package demo

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txinbox/inbox/inboxkafka"
	"github.com/txinbox/inbox/inboxnats"
	"github.com/txinbox/inbox/inboxrabbit"
	"github.com/txinbox/inbox/outbox"
)

// paymentsBroker is where the producer's side of the demo sends its
// PaymentCaptured events and reads them back: a destination of its own per
// producer strategy, on the run's broker.
type paymentsBroker interface {
	// dest makes the destination of strategy's events: a topic, a
	// stream's subject, a queue.
	dest(ctx context.Context, strategy string) (string, error)
	// sink is the outbox's sink to the broker.
	sink() outbox.Sink
	// send publishes one event with id in its event-id header, and waits
	// for the broker's confirmation.
	send(ctx context.Context, dest, id, key string, body []byte) error
	// stored is how many of the sent records dest holds: sent, except
	// where the broker drops republished ids itself (JetStream).
	stored(ctx context.Context, dest string, sent int) (int, error)
	// read hands fn each of the first want records of dest, in order.
	read(ctx context.Context, dest string, want int, fn func(headers map[string]string, body []byte) error) error
	close()
}

// paymentsOn returns the producer's side of b.
func paymentsOn(ctx context.Context, b broker) (paymentsBroker, error) {
	switch b := b.(type) {
	case *kafka:
		cl, err := kgo.NewClient(kgo.SeedBrokers(b.seeds...))
		if err != nil {
			return nil, err
		}
		return &kafkaPayments{k: b, cl: cl}, nil
	case *natsBroker:
		return &natsPayments{n: b, streams: map[string]string{}}, nil
	case *rabbitBroker:
		ch, err := b.conn.Channel()
		if err != nil {
			return nil, err
		}
		sink, err := inboxrabbit.NewOutboxSink(ch, nil)
		if err != nil {
			return nil, err
		}
		return &rabbitPayments{r: b, ch: ch, out: sink}, nil
	}
	return nil, fmt.Errorf("demo: no producer's side on %s", b.kind())
}

// readDeadline bounds a read of the producer's records.
const readDeadline = time.Minute

type kafkaPayments struct {
	k  *kafka
	cl *kgo.Client
}

func (p *kafkaPayments) dest(ctx context.Context, strategy string) (string, error) {
	topic := p.k.topic + "-" + strategy
	return topic, createTopic(ctx, p.k.seeds, topic)
}

func (p *kafkaPayments) sink() outbox.Sink { return inboxkafka.NewOutboxSink(p.cl) }

func (p *kafkaPayments) send(ctx context.Context, dest, id, key string, body []byte) error {
	rec := &kgo.Record{Topic: dest, Key: []byte(key), Value: body,
		Headers: []kgo.RecordHeader{{Key: outbox.HeaderEventID, Value: []byte(id)}}}
	return p.cl.ProduceSync(ctx, rec).FirstErr()
}

func (p *kafkaPayments) stored(_ context.Context, _ string, sent int) (int, error) { return sent, nil }

func (p *kafkaPayments) read(ctx context.Context, dest string, want int, fn func(map[string]string, []byte) error) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(p.k.seeds...), kgo.ConsumeTopics(dest),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		return err
	}
	defer cl.Close()
	got := 0
	deadline := time.Now().Add(readDeadline)
	for got < want {
		if time.Now().After(deadline) {
			return fmt.Errorf("read %d of %d records within %v", got, want, readDeadline)
		}
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		fetches := cl.PollFetches(pctx)
		cancel()
		if err := ctx.Err(); err != nil {
			return err
		}
		var ferr error
		fetches.EachRecord(func(r *kgo.Record) {
			if ferr != nil {
				return
			}
			h := map[string]string{}
			for _, x := range r.Headers {
				h[x.Key] = string(x.Value)
			}
			ferr = fn(h, r.Value)
			got++
		})
		if ferr != nil {
			return ferr
		}
	}
	return nil
}

func (p *kafkaPayments) close() { p.cl.Close() }

// natsPayments sends each strategy's events to a stream of its own, whose
// duplicate window drops a republished Nats-Msg-Id.
type natsPayments struct {
	n       *natsBroker
	streams map[string]string // subject → stream
}

func (p *natsPayments) dest(ctx context.Context, strategy string) (string, error) {
	stream := p.n.stream + "_" + strings.ToUpper(strings.ReplaceAll(strategy, "-", "_"))
	subject := p.n.subject + "." + strategy
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := p.n.js.CreateStream(cctx, jetstream.StreamConfig{Name: stream, Subjects: []string{subject}, Storage: jetstream.FileStorage}); err != nil {
		return "", fmt.Errorf("demo: create stream %s: %w", stream, err)
	}
	p.streams[subject] = stream
	return subject, nil
}

func (p *natsPayments) stream(dest string) string { return p.streams[dest] }

func (p *natsPayments) sink() outbox.Sink { return inboxnats.NewOutboxSink(p.n.js) }

func (p *natsPayments) send(ctx context.Context, dest, id, _ string, body []byte) error {
	m := nats.NewMsg(dest)
	m.Data = body
	m.Header.Set(outbox.HeaderEventID, id)
	_, err := p.n.js.PublishMsg(ctx, m)
	return err
}

func (p *natsPayments) stored(ctx context.Context, dest string, _ int) (int, error) {
	s, err := p.n.js.Stream(ctx, p.stream(dest))
	if err != nil {
		return 0, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, err
	}
	return int(info.State.Msgs), nil
}

func (p *natsPayments) read(ctx context.Context, dest string, want int, fn func(map[string]string, []byte) error) error {
	cons, err := p.n.js.OrderedConsumer(ctx, p.stream(dest), jetstream.OrderedConsumerConfig{})
	if err != nil {
		return err
	}
	deadline := time.Now().Add(readDeadline)
	for got := 0; got < want; {
		if time.Now().After(deadline) {
			return fmt.Errorf("read %d of %d messages within %v", got, want, readDeadline)
		}
		m, err := cons.Next(jetstream.FetchMaxWait(time.Second))
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			continue
		}
		h := map[string]string{}
		for k := range m.Headers() {
			h[k] = m.Headers().Get(k)
		}
		if err := fn(h, m.Data()); err != nil {
			return err
		}
		got++
	}
	return nil
}

func (p *natsPayments) close() {
	if p.n.srv != nil {
		return // the embedded server's store goes with it
	}
	for _, s := range p.streams {
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = p.n.js.DeleteStream(dctx, s)
		cancel()
	}
}

// rabbitPayments sends each strategy's events to a queue of its own,
// through the default exchange.
type rabbitPayments struct {
	r      *rabbitBroker
	ch     *amqp.Channel
	out    *inboxrabbit.OutboxSink
	queues []string
}

func (p *rabbitPayments) dest(_ context.Context, strategy string) (string, error) {
	q := p.r.exchange + ".payments." + strategy
	if _, err := p.r.ch.QueueDeclare(q, false, false, false, false, amqp.Table{"x-expires": int32(10 * 60 * 1000)}); err != nil {
		return "", fmt.Errorf("demo: declare queue %s: %w", q, err)
	}
	p.queues = append(p.queues, q)
	return q, nil
}

func (p *rabbitPayments) sink() outbox.Sink { return p.out }

func (p *rabbitPayments) send(ctx context.Context, dest, id, _ string, body []byte) error {
	errs := p.out.Publish(ctx, []outbox.Record{{ID: id, Topic: dest, Headers: map[string]string{outbox.HeaderEventID: id}, Payload: body, CreatedAt: time.Now()}})
	return errs[0]
}

func (p *rabbitPayments) stored(_ context.Context, _ string, sent int) (int, error) { return sent, nil }

func (p *rabbitPayments) read(ctx context.Context, dest string, want int, fn func(map[string]string, []byte) error) error {
	deadline := time.Now().Add(readDeadline)
	for got := 0; got < want; {
		d, ok, err := p.r.ch.Get(dest, true)
		if err != nil {
			return err
		}
		if !ok {
			if time.Now().After(deadline) {
				return fmt.Errorf("read %d of %d messages within %v", got, want, readDeadline)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		h := map[string]string{}
		for k, v := range d.Headers {
			if s, ok := v.(string); ok {
				h[k] = s
			}
		}
		if err := fn(h, d.Body); err != nil {
			return err
		}
		got++
	}
	return nil
}

func (p *rabbitPayments) close() {
	for _, q := range p.queues {
		_, _ = p.r.ch.QueueDelete(q, false, false, false)
	}
	if p.ch != nil {
		_ = p.ch.Close()
	}
}
