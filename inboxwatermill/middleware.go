package inboxwatermill

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/internal/fault"
	"github.com/txinbox/inbox/outbox"
)

// KeyFunc returns the event id of a Watermill message: the id the inbox
// claims. It must be the same on every delivery of the event.
type KeyFunc func(msg *message.Message) (string, error)

// KeyUUID is the default KeyFunc: the message's UUID. Watermill's
// publishers carry it across the wire (a reserved header on most
// marshalers, a column in watermill-sql), so it is the producer's id when
// the producer set it once and every publish of the event carries it:
// message.NewMessage(id, payload) with an id stored with the event, or
// this package's Sink, whose UUID is the outbox's event id. It is not the
// producer's id when a producer mints a new UUID on each attempt
// (message.NewMessage(watermill.NewUUID(), …) inside a retry loop), nor
// when a subscriber makes one up because the wire had none (a Kafka record
// without Watermill's header, an unmarshaler that calls NewUUID): then each
// delivery looks new, and KeyMetadata with the producer's own header is
// the key to use.
func KeyUUID(msg *message.Message) (string, error) {
	if msg.UUID == "" {
		return "", inbox.ErrNoMessageID
	}
	return msg.UUID, nil
}

// KeyMetadata returns a KeyFunc that reads the event id from the metadata
// field name, such as outbox.HeaderEventID.
func KeyMetadata(name string) KeyFunc {
	return func(msg *message.Message) (string, error) {
		id := msg.Metadata.Get(name)
		if id == "" {
			return "", fmt.Errorf("%w: no metadata %q", inbox.ErrNoMessageID, name)
		}
		return id, nil
	}
}

// Config configures Middleware. The zero value is valid for a handler that
// produces no messages.
type Config[TTx any] struct {
	// Key returns the event id of a message. Defaults to KeyUUID.
	Key KeyFunc

	// Outbox receives the messages the handler returns, in the handler's
	// transaction, so that they commit with the inbox row, and its relays
	// publish them. Required when the handler returns messages, unless
	// PublishAfterCommit is set. A produced message's UUID becomes its
	// event id, so it must be valid in the outbox's IDFormat (those of
	// watermill.NewUUID are); an empty one is minted by the outbox.
	// Defaults to nil.
	Outbox *outbox.Outbox[TTx]

	// Topic returns the outbox topic of a produced message. Defaults to the
	// handler's publish topic, as given to Router.AddHandler.
	Topic func(produced *message.Message) string

	// PartitionKey returns the outbox key of a produced message: the
	// Kafka partition key, the FIFO group; in ordered outboxes the key
	// whose events keep their order. Defaults to none.
	PartitionKey func(produced *message.Message) []byte

	// PublishAfterCommit, with no Outbox, hands the produced messages back
	// to the Router, which publishes them after the commit. It is lossy:
	// when that publish fails, the Router nacks, the redelivery is a
	// Duplicate, and the messages are never published. Use the Outbox.
	// Defaults to false: a handler that returns messages with no Outbox
	// fails, and its transaction rolls back.
	PublishAfterCommit bool
}

// ErrNoOutbox is the error of a handler that returned messages under a
// Middleware with neither Config.Outbox nor Config.PublishAfterCommit. Its
// transaction was rolled back.
var ErrNoOutbox = errors.New("inboxwatermill: the handler returned messages, but Config.Outbox is nil")

// processor is the part of inbox.Client the middleware uses.
type processor[TTx any] interface {
	Process(ctx context.Context, consumer string, msg inbox.Message, h inbox.Handler[TTx]) (inbox.Outcome, error)
}

// Middleware returns a Router middleware that runs the wrapped handler
// exactly once per event for consumer, inside client.Process. For each
// message it:
//
//  1. claims the message's key for consumer, first in a new transaction;
//  2. if the claim is new, calls the handler with the transaction in the
//     message's context (TxFromContext);
//  3. enqueues the messages the handler returned into Config.Outbox, in
//     the same transaction, with the message's key as their causation id;
//  4. commits, and returns no messages and no error: the Router acks.
//
// A message whose key this consumer has applied already is a Duplicate:
// the handler does not run and the Router acks. A handler's error, a
// store's error or a commit whose outcome is unknown returns an error: the
// Router nacks, and the redelivery is applied, or found to be a Duplicate.
//
// Put it innermost. Watermill wraps middlewares in the order they were
// added, router-level and handler-level alike, the first added outermost:
// call Router.AddMiddleware(poisonQueue, retry.Middleware) before the
// handler's AddMiddleware(Middleware(...)). Never add Watermill's
// Deduplicator (see the package doc).
func Middleware[TTx any](client *inbox.Client[TTx], consumer string, config *Config[TTx]) message.HandlerMiddleware {
	if client == nil {
		return middleware[TTx](nil, consumer, config)
	}
	return middleware[TTx](client, consumer, config)
}

func middleware[TTx any](client processor[TTx], consumer string, config *Config[TTx]) message.HandlerMiddleware {
	var cfg Config[TTx]
	if config != nil {
		cfg = *config
	}
	if cfg.Key == nil {
		cfg.Key = KeyUUID
	}
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			if client == nil {
				return nil, errors.New("inboxwatermill: Middleware: client is nil")
			}
			id, err := cfg.Key(msg)
			if err != nil {
				return nil, fmt.Errorf("inboxwatermill: consumer %s: message %s: key: %w", consumer, msg.UUID, err)
			}
			orig := msg.Context()
			// The Duplicator and retries call the middleware again with the
			// same message: each call starts from its own context.
			defer msg.SetContext(orig)
			var after []*message.Message
			in := inbox.Message{
				ID:      id,
				Payload: msg.Payload,
				Headers: msg.Metadata,
				Source:  inbox.Source{Transport: "watermill", Queue: message.SubscribeTopicFromCtx(orig), BrokerID: msg.UUID},
			}
			out, err := client.Process(orig, consumer, in, inbox.HandlerFunc[TTx](func(ctx context.Context, tx TTx, in inbox.Message) error {
				after = nil
				msg.SetContext(withCause(WithTx(ctx, tx), in.ID))
				produced, err := h(msg)
				msg.SetContext(orig)
				if err != nil || len(produced) == 0 {
					return err
				}
				switch {
				case cfg.Outbox != nil:
					return enqueue(ctx, &cfg, tx, in.ID, orig, produced)
				case cfg.PublishAfterCommit:
					after = produced
					return nil
				default:
					return inbox.Permanent(ErrNoOutbox)
				}
			}))
			if err != nil {
				return nil, fmt.Errorf("inboxwatermill: consumer %s: message %s: %w", consumer, msg.UUID, err)
			}
			if out == inbox.Duplicate {
				return nil, nil
			}
			// The Router acks next: the chaos tools' crash point.
			fault.Inject(orig, fault.AfterCommitBeforeAck)
			return after, nil
		}
	}
}

// enqueue writes produced into the outbox inside tx, caused by the message
// whose event id is cause.
func enqueue[TTx any](ctx context.Context, cfg *Config[TTx], tx TTx, cause string, in context.Context, produced []*message.Message) error {
	msgs := make([]outbox.Message, len(produced))
	for i, p := range produced {
		topic := message.PublishTopicFromCtx(in)
		if cfg.Topic != nil {
			topic = cfg.Topic(p)
		}
		if topic == "" {
			return inbox.Permanent(fmt.Errorf("inboxwatermill: produced message %d (%s) has no topic: the handler has no publish topic and Config.Topic is nil", i, p.UUID))
		}
		msgs[i] = outboxMessage(p, topic)
		msgs[i].CausationID = cause
		if cfg.PartitionKey != nil {
			msgs[i].Key = cfg.PartitionKey(p)
		}
	}
	if _, err := cfg.Outbox.EnqueueTx(ctx, tx, msgs...); err != nil {
		if errors.Is(err, outbox.ErrInvalidMessage) {
			err = inbox.Permanent(err)
		}
		return err
	}
	return nil
}

// outboxMessage turns a Watermill message into an outbox message for
// topic. Its UUID becomes the event id, so a consumer sees the UUID the
// producer chose; metadata that names the outbox's own headers, which a
// handler copies from the message it received, is left for the relay to
// set.
func outboxMessage(m *message.Message, topic string) outbox.Message {
	var headers map[string]string
	if len(m.Metadata) > 0 {
		headers = maps.Clone(map[string]string(m.Metadata))
		delete(headers, outbox.HeaderEventID)
		delete(headers, outbox.HeaderCausationID)
		delete(headers, outbox.HeaderKeySeq)
	}
	return outbox.Message{ID: m.UUID, Topic: topic, Headers: headers, Payload: m.Payload}
}
