package demo

import (
	"context"
	"encoding/json"
	"fmt"
)

// The transports the demo runs on.
const (
	TransportKafka    = "kafka"
	TransportNATS     = "nats"
	TransportRabbitMQ = "rabbitmq"
)

// Transports lists the transports, the default first.
var Transports = []string{TransportKafka, TransportNATS, TransportRabbitMQ}

// broker is the demo's transport: where the records are produced, where
// the hand-written consumers read them, and where the inbox consumer
// processes are told to read them. Every strategy's consumer has a
// subscription of its own (a consumer group, a durable JetStream consumer,
// a queue), so that each reads every record.
type broker interface {
	// kind names the broker for the log.
	kind() string
	// produce sends the records, in order, each with its event id in the
	// event-id header.
	produce(ctx context.Context, records []event) error
	// subscribe starts one life of a hand-written consumer of strategy:
	// it reads from where the last life acknowledged.
	subscribe(ctx context.Context, strategy, consumer string) (subscription, error)
	// inboxArgs are the demo-consumer flags that tell an inbox consumer
	// process where its records are.
	inboxArgs(ctx context.Context, consumer string) ([]string, error)
	close()
}

// subscription is one life of a hand-written consumer.
type subscription interface {
	// poll returns the records that arrived, waiting up to half a second
	// for some.
	poll(ctx context.Context) ([]*record, error)
	// ack acknowledges recs: commits their offsets, or acks them, and
	// waits until the broker has it.
	ack(ctx context.Context, recs []*record) error
	// close ends the life without acknowledging anything more, as a crash
	// does: the broker delivers what was not acknowledged again.
	close()
}

// record is a delivery, as the hand-written consumers see it.
type record struct {
	// index is the record's place in the produce order: where the
	// scenario's crashes fall.
	index int
	// key is the broker's own name for the delivery, the key of the
	// offset-key strategy: topic/partition/offset on Kafka, the stream
	// sequence on NATS, the delivery tag on RabbitMQ.
	key string
	// id is the event-id header.
	id   string
	body []byte
	// raw is the broker's delivery, for ack.
	raw any
}

// decode reads the event a record carries.
func (r *record) decode() (event, error) {
	e, err := decodeBody(r.body)
	e.ID = r.id
	return e, err
}

// decodeBody reads an event's body; the id travels in a header.
func decodeBody(body []byte) (event, error) {
	var e event
	var b struct {
		Account string `json:"account"`
		Cents   int64  `json:"amount_cents"`
		SKU     string `json:"sku"`
		Qty     int64  `json:"qty"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		return e, err
	}
	e.Account, e.Cents, e.SKU, e.Qty = b.Account, b.Cents, b.SKU, b.Qty
	return e, nil
}

// newBroker starts or connects to cfg's broker.
func newBroker(ctx context.Context, cfg *Config) (broker, error) {
	switch cfg.Transport {
	case TransportKafka:
		return newKafka(ctx, cfg.Brokers, cfg.Log)
	case TransportNATS:
		return newNATS(ctx, cfg.NATSURL)
	case TransportRabbitMQ:
		return newRabbit(cfg.AMQPURL)
	default:
		return nil, fmt.Errorf("demo: transport %q: want kafka, nats or rabbitmq", cfg.Transport)
	}
}
