package inbox

import (
	"context"
	"fmt"
)

// Message is one delivery of an event, as a transport adapter hands it to
// the client.
type Message struct {
	// ID is the producer's event id: the same for every delivery and every
	// republish of the event. The client validates and canonicalises it
	// according to Config.IDFormat before it is claimed. A transport adapter
	// sets it with a KeyFunc; nothing in this module ever mints one.
	ID string
	// Payload is the message body.
	Payload []byte
	// Headers are the message's headers or attributes.
	Headers map[string]string
	// Source tells where the message came from. It is recorded with dead
	// letters and logs and is never used as identity.
	Source Source

	// keyed is ID as Client.Key canonicalised it, for the client keyedBy.
	// That client takes ID as canonical, and does not check it again,
	// while ID still equals keyed.
	keyed   string
	keyedBy *Admin
}

// Source holds the transport coordinates of a delivery.
type Source struct {
	// Transport names the broker kind: "kafka", "sqs", "nats", "rabbitmq".
	Transport string
	// Queue is the topic, queue URL, stream subject or queue name.
	Queue string
	// Partition and Offset locate a Kafka record (or a stream sequence).
	Partition int32
	Offset    int64
	// BrokerID is the broker's own id of this delivery, such as an SQS
	// MessageId.
	BrokerID string
	// Key is the record key, if any.
	Key []byte
	// Redelivered reports that the broker may have delivered this message
	// before (an SQS receive count, a JetStream delivery count or an AMQP
	// delivery's Redelivered flag above the first; a Kafka record fetched
	// again after an assignment). With it the client tells a lost ack from
	// a producer's republish when the message is a Duplicate.
	Redelivered bool
	// Attempt is the broker's delivery count of this message, 1 for the
	// first delivery, 0 when the broker keeps none.
	Attempt int
}

// String formats s as a coordinate such as "kafka:orders/3@1207".
func (s Source) String() string {
	switch {
	case s.BrokerID != "":
		return fmt.Sprintf("%s:%s#%s", s.Transport, s.Queue, s.BrokerID)
	case s.Transport == "":
		return ""
	default:
		return fmt.Sprintf("%s:%s/%d@%d", s.Transport, s.Queue, s.Partition, s.Offset)
	}
}

// Outcome is what processing a message did.
type Outcome uint8

const (
	// Applied means the handler ran and its transaction, with the inbox
	// row, committed. Ack the message.
	Applied Outcome = iota + 1
	// Duplicate means this consumer had already applied the message's id.
	// The handler did not run. Ack the message.
	Duplicate
)

func (o Outcome) String() string {
	switch o {
	case Applied:
		return "applied"
	case Duplicate:
		return "duplicate"
	default:
		return fmt.Sprintf("Outcome(%d)", uint8(o))
	}
}

// Handler applies a message's side effects inside tx, the transaction that
// holds the message's inbox row. It must do all its database work through tx
// and must not commit or roll it back. An error rolls the transaction back;
// wrap it with Permanent when retrying cannot help. Side effects outside the
// database, such as a call to a payment provider, go through Client.Effect
// with the ctx the handler receives, which names the consumer.
//
// A handler that only queues its statements on tx, such as
// inboxpgx.PipelineFunc, says so by implementing inboxdriver.Pipelined: a
// store that can then sends BEGIN, the claim, the statements and COMMIT in
// one round trip, where a handler that runs its statements costs three.
type Handler[TTx any] interface {
	Handle(ctx context.Context, tx TTx, msg Message) error
}

// HandlerFunc adapts a function to a Handler.
type HandlerFunc[TTx any] func(ctx context.Context, tx TTx, msg Message) error

// Handle calls f.
func (f HandlerFunc[TTx]) Handle(ctx context.Context, tx TTx, msg Message) error {
	return f(ctx, tx, msg)
}

// BatchHandler is a Handler that can also apply many messages at once, such
// as with one multi-row statement. ProcessBatch and ProcessBatchOrdered
// call HandleBatch once per transaction with the messages whose claims were
// new, in order. When it fails, the batch is split in halves, each run as a
// batch of its own, down to single messages, which go to Handle: a poison
// message is still isolated, at the cost of a few more transactions.
// Process calls Handle.
type BatchHandler[TTx any] interface {
	Handler[TTx]
	HandleBatch(ctx context.Context, tx TTx, msgs []Message) error
}

// BatchHandlerFunc adapts a function to a BatchHandler. Its Handle calls
// the function with the one message.
type BatchHandlerFunc[TTx any] func(ctx context.Context, tx TTx, msgs []Message) error

// Handle calls f with msg alone.
func (f BatchHandlerFunc[TTx]) Handle(ctx context.Context, tx TTx, msg Message) error {
	return f(ctx, tx, []Message{msg})
}

// HandleBatch calls f.
func (f BatchHandlerFunc[TTx]) HandleBatch(ctx context.Context, tx TTx, msgs []Message) error {
	return f(ctx, tx, msgs)
}
