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
type Handler[TTx any] interface {
	Handle(ctx context.Context, tx TTx, msg Message) error
}

// HandlerFunc adapts a function to a Handler.
type HandlerFunc[TTx any] func(ctx context.Context, tx TTx, msg Message) error

// Handle calls f.
func (f HandlerFunc[TTx]) Handle(ctx context.Context, tx TTx, msg Message) error {
	return f(ctx, tx, msg)
}

// PipelinedHandler is a Handler whose database work a store can send
// together with the rest of the message's transaction: BEGIN, the claim,
// the work and COMMIT in one round trip, where Handle costs three (BEGIN
// and the claim, the work, COMMIT), as do BEGIN, the work and COMMIT
// written by hand. It suits work whose statements need nothing back before
// the next is sent, such as writing an event into a projection or updating
// a balance.
//
// Process uses Pipeline when the store can pipeline (inboxpgx; see
// inboxpgx.PipelineFunc); elsewhere (ProcessBatch, ProcessTx, other stores)
// Handle runs, after the claim. Pipeline runs before the claim's outcome is
// known, so it must only describe the work, with no effect of its own. The
// claim still comes first in the transaction: a duplicate fails it, and the
// server skips the work. The server logs that failure (a unique violation)
// as an error, so after a duplicate Process looks each message up first, in
// one round trip outside a transaction, and reports Duplicate when its row
// is committed; the first message not found ends the run and goes
// pipelined. A replay of many duplicates logs one line, and each of its
// messages costs one short query.
//
// An error from Pipeline is the handler's error for a new message; a
// duplicate is still a Duplicate, as the claim is made all the same.
type PipelinedHandler[TTx any] interface {
	Handler[TTx]
	// Pipeline describes msg's work in the store's form (for inboxpgx, a
	// *pgx.Batch of the statements).
	Pipeline(ctx context.Context, msg Message) (work any, err error)
}

// PipelinedBatchHandler is a BatchHandler whose work for a whole batch a
// store can send with the batch's transaction in one round trip: BEGIN, a
// claim of every id, the work, COMMIT. ProcessBatch and ProcessBatchOrdered
// try a batch that way first; a duplicate among its messages fails the
// claim, nothing runs, and the batch is claimed on its own and its new
// messages handled, as for any BatchHandler. After such a duplicate the
// consumer's batches are claimed first until one is all new (see
// PipelinedHandler). A failure of the work splits the batch as a
// BatchHandler's does. inboxpgx.PipelineBatchFunc is one.
type PipelinedBatchHandler[TTx any] interface {
	BatchHandler[TTx]
	PipelinedHandler[TTx]
	// PipelineBatch describes the work of msgs, in order, in the store's
	// form (for inboxpgx, a *pgx.Batch).
	PipelineBatch(ctx context.Context, msgs []Message) (work any, err error)
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
