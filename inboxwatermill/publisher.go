package inboxwatermill

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/txinbox/inbox/outbox"
)

// ErrNoTx is returned by Publisher.Publish for a message whose context
// carries no transaction: the outbox writes only inside the caller's.
var ErrNoTx = errors.New("inboxwatermill: the message's context carries no transaction (use WithTx, or publish from a handler under Middleware)")

// Publisher is a message.Publisher that writes into an outbox: Publish
// enqueues the messages in the transaction their context carries (WithTx,
// or the one Middleware gives a handler), and the outbox's relays publish
// them once that transaction commits. It takes the place of watermill-sql's
// publisher and Forwarder, with no second table to poll. A message's UUID
// becomes its event id: leave it empty and the outbox mints a UUIDv7.
type Publisher[TTx any] struct {
	o *outbox.Outbox[TTx]
	// PartitionKey returns the outbox key of a message. Defaults to none.
	PartitionKey func(msg *message.Message) []byte
}

var _ message.Publisher = (*Publisher[any])(nil)

// NewPublisher returns a Publisher that enqueues into o.
func NewPublisher[TTx any](o *outbox.Outbox[TTx]) *Publisher[TTx] {
	return &Publisher[TTx]{o: o}
}

// Publish enqueues msgs for topic in the transaction of each message's
// context, and fails with ErrNoTx, enqueuing nothing, when one has none.
// Consecutive messages with the same context go in one statement. When the
// messages came from a handler under Middleware, their causation id is the
// key of the message being handled.
func (p *Publisher[TTx]) Publish(topic string, msgs ...*message.Message) error {
	if p == nil || p.o == nil {
		return errors.New("inboxwatermill: Publisher has no outbox: use NewPublisher")
	}
	type run struct {
		ctx  context.Context
		tx   TTx
		msgs []outbox.Message
	}
	var runs []*run
	for i, m := range msgs {
		ctx := m.Context()
		tx, ok := TxFromContext[TTx](ctx)
		if !ok {
			return fmt.Errorf("inboxwatermill: publish message %d (%s) to %s: %w", i, m.UUID, topic, ErrNoTx)
		}
		om := outboxMessage(m, topic)
		om.CausationID = causation(ctx)
		if p.PartitionKey != nil {
			om.Key = p.PartitionKey(m)
		}
		if n := len(runs); n > 0 && sameContext(runs[n-1].ctx, ctx) {
			runs[n-1].msgs = append(runs[n-1].msgs, om)
			continue
		}
		runs = append(runs, &run{ctx: ctx, tx: tx, msgs: []outbox.Message{om}})
	}
	for _, r := range runs {
		if _, err := p.o.EnqueueTx(r.ctx, r.tx, r.msgs...); err != nil {
			return fmt.Errorf("inboxwatermill: publish to %s: %w", topic, err)
		}
	}
	return nil
}

// Close does nothing: the outbox belongs to the caller.
func (p *Publisher[TTx]) Close() error { return nil }

// sameContext reports whether a and b are the same context value.
func sameContext(a, b context.Context) bool {
	if a == nil || b == nil || reflect.TypeOf(a) != reflect.TypeOf(b) || !reflect.TypeOf(a).Comparable() {
		return false
	}
	return a == b
}

type causeKey struct{}

// withCause records in ctx the key of the message being handled.
func withCause(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, causeKey{}, id)
}

func causation(ctx context.Context) string {
	id, _ := ctx.Value(causeKey{}).(string)
	return id
}
