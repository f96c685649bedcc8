package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Sink publishes records to a broker. Sinks for Kafka, SQS, NATS
// JetStream and RabbitMQ live in packages inboxkafka, inboxsqs, inboxnats
// and inboxrabbit, over the caller's client; MemorySink keeps records in
// memory, for tests and benchmarks. Package outboxtest is the conformance
// suite a sink runs against its broker.
type Sink interface {
	// Publish publishes recs and returns one error per record, in order:
	// nil once the broker confirmed that record (Kafka acks, an SQS 200),
	// and otherwise why not. Wrap an error with Unavailable when the broker
	// could not be reached, or did not answer in time: the record is tried
	// again, as soon as the broker is back, and the failure costs it no
	// attempt. Any other error is a rejection of that record: it counts
	// towards RelayConfig.MaxRejections, after which the record is parked.
	//
	// A sink must not keep recs or their slices after it returns. ctx ends
	// before the relay's lease on the records does.
	Publish(ctx context.Context, recs []Record) []error
}

// KeyOrderSink is a Sink that can take a run of a key's events in one call.
// In ordered mode the relay gives a Sink one event per key per call, the
// next only once the broker confirmed the one before, so that a key
// publishes about one event per broker round trip. To a KeyOrderSink whose
// KeepsKeyOrder reports true it gives, in one call, as many of a key's
// consecutive ready events as it claimed, up to the first that goes to
// another topic, and counts as published only the ones before the first
// that failed: the rest are tried again later, in order.
//
// KeepsKeyOrder may report true only if, for any two records a and b of
// one key and one topic in one call, a before b:
//   - the broker takes b after a (a consumer of the topic sees a first),
//     and
//   - when a fails, whatever the error, b is not published either: the
//     sink answers an error for it (ErrKeyStopped where it did not try
//     it), and the broker never takes it.
//
// So nothing after a gap is ever published; a republish of what was
// published is a duplicate, never a gap. A sink that cannot promise the
// second part (a broker that goes on with the next message after refusing
// one) must report false. docs/OUTBOX.md says which sinks keep order.
type KeyOrderSink interface {
	Sink
	// KeepsKeyOrder reports whether the sink keeps the order of a key's
	// records within one call, as KeyOrderSink describes. The relay asks
	// once, when it is made.
	KeepsKeyOrder() bool
}

// ErrKeyStopped is a KeyOrderSink's answer for a record it did not
// publish because an earlier record of its key in the same call failed.
var ErrKeyStopped = errors.New("outbox: not published: an earlier record of its key failed in the same call")

// SinkFunc adapts a function to a Sink.
type SinkFunc func(ctx context.Context, recs []Record) []error

// Publish calls f.
func (f SinkFunc) Publish(ctx context.Context, recs []Record) []error { return f(ctx, recs) }

// Record is an event as a sink publishes it.
type Record struct {
	// ID is the event id, also in Headers[HeaderEventID].
	ID    string
	Topic string
	Key   []byte
	// Headers are the message's headers with the outbox's own added:
	// HeaderEventID always, HeaderCausationID and HeaderKeySeq when set.
	Headers map[string]string
	Payload []byte
	// KeySeq is the event's place among the events of its key in ordered
	// mode, or 0.
	KeySeq int64
	// CreatedAt is when the event was enqueued.
	CreatedAt time.Time
	// Attempt counts the broker's earlier rejections of the record.
	Attempt int
}

// ErrUnavailable marks a sink's error as the broker's unavailability:
// unreachable, timing out, refusing for a while. Test with errors.Is.
var ErrUnavailable = errors.New("outbox: broker unavailable")

// Unavailable wraps err, a sink's error, so that the relay treats it as the
// broker's unavailability rather than a rejection of the record.
func Unavailable(err error) error {
	if err == nil || errors.Is(err, ErrUnavailable) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// IsUnavailable reports whether err says the broker was unavailable. A
// context that ended is unavailability too: the relay stopped, or the
// broker did not answer within the lease.
func IsUnavailable(err error) bool {
	return errors.Is(err, ErrUnavailable) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
