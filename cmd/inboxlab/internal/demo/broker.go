package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/txinbox/inbox/cmd/inboxlab/internal/broker"
	"github.com/txinbox/inbox/internal/testdb"
)

// The transports the demo runs on.
const (
	TransportKafka    = broker.TransportKafka
	TransportNATS     = broker.TransportNATS
	TransportRabbitMQ = broker.TransportRabbitMQ
)

// Transports lists the transports, the default first.
var Transports = []string{TransportKafka, TransportNATS, TransportRabbitMQ}

// DefaultAMQPURL is the local RabbitMQ the demo runs on with --transport
// rabbitmq.
const DefaultAMQPURL = broker.DefaultAMQPURL

// timings are the Kafka consumers' timings: a short session, so that the
// next life of an inbox consumer killed in its group takes its partition
// at once, and short fetches.
var timings = broker.KafkaTimings{Session: 1500 * time.Millisecond, Heartbeat: 100 * time.Millisecond, FetchWait: 50 * time.Millisecond}

// ackWait is the AckWait of the NATS durables: a message a consumer held
// when it crashed comes back when it runs out, so it is short, and the
// inbox consumers' heartbeat keeps a message held while it is processed.
const ackWait = 2 * time.Second

// headerIndex carries a record's place in the produce order: where the
// scenario's crashes fall.
const headerIndex = "demo-index"

// openBroker starts or reaches cfg's broker, and creates the run's topic:
// one partition on Kafka, so that the order of the records, and so every
// count, is the same on every run. Every strategy's consumer has a
// subscription of its own (a consumer group, a durable, a queue), so that
// each reads every record; a NATS durable holds at most batchSize messages
// unacknowledged, so that what a crashed consumer held comes back, in
// order, before anything after it, as a Kafka consumer group restarts from
// its committed offset, and RabbitMQ's consumers take as many (their
// prefetch is their batch).
func openBroker(ctx context.Context, cfg *Config) (broker.Broker, broker.Topic, error) {
	b, err := broker.Open(&broker.Config{
		Transport: cfg.Transport, Brokers: cfg.Brokers, NATSURL: cfg.NATSURL, AMQPURL: cfg.AMQPURL, Kafka: timings, Log: cfg.Log,
	})
	if err != nil {
		return nil, nil, err
	}
	var subs []string
	for _, strategy := range Strategies {
		for _, consumer := range consumers {
			subs = append(subs, subscription(strategy, consumer))
		}
	}
	t, err := b.NewTopic(ctx, "inbox-demo-"+testdb.RandomSuffix(), &broker.TopicConfig{Subscriptions: subs, Redelivery: ackWait, MaxPending: batchSize})
	if err != nil {
		b.Close()
		return nil, nil, err
	}
	return b, t, nil
}

// subscription is the subscription of a strategy's consumer.
func subscription(strategy, consumer string) string { return strategy + "-" + consumer }

// produce sends the records in order, each with its event id and its
// place in the order in headers.
func produce(ctx context.Context, t broker.Topic, records []event) error {
	msgs := make([]broker.Message, len(records))
	for i, e := range records {
		msgs[i] = broker.Message{ID: e.ID, Key: e.Account, Body: e.body(), Headers: map[string]string{headerIndex: strconv.Itoa(i)}}
	}
	if err := t.Send(ctx, msgs...); err != nil {
		return fmt.Errorf("produce: %w", err)
	}
	return nil
}

// poll is how the hand-written consumers poll: a batch, waiting half a
// second for it, and acknowledgements the broker has confirmed.
var poll = &broker.PollConfig{Batch: batchSize, Wait: 500 * time.Millisecond, ConfirmAcks: true}

// record is a delivery, as the hand-written consumers see it.
type record struct {
	*broker.Delivery
	// index is the record's place in the produce order: where the
	// scenario's crashes fall.
	index int
}

func newRecord(d *broker.Delivery) (*record, error) {
	index, err := strconv.Atoi(d.Header(headerIndex))
	if err != nil {
		return nil, fmt.Errorf("a delivery without its %s header", headerIndex)
	}
	return &record{Delivery: d, index: index}, nil
}

// decode reads the event a record carries.
func (r *record) decode() (event, error) {
	e, err := decodeBody(r.Body)
	e.ID = r.ID
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
