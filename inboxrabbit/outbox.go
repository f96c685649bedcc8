package inboxrabbit

import (
	"context"
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txinbox/inbox/outbox"
)

// OutboxSink publishes an outbox's events to RabbitMQ over the caller's
// channel, with publisher confirms: each event is a persistent message
// published to OutboxSinkConfig.Exchange with the event's topic as its
// routing key, mandatory, with the event id as its message-id property and
// in its headers (outbox.HeaderEventID), beside the event's own headers. A
// consumer reads the id with inbox.HeaderKey(outbox.HeaderEventID), or with
// MessageIDKey.
//
// The broker's nack of a message, or its return as unroutable (no queue is
// bound to take it), is a rejection of that event, which counts towards
// the relay's outbox.RelayConfig.MaxRejections. A channel or connection
// that closed, or a confirm that did not come in time, is the broker's
// unavailability: the event is published again later and costs no attempt.
// amqp091-go does not reconnect: a relay whose sink's channel died needs a
// new sink over a new channel (inbox relay --sink rabbitmq does that).
//
// AMQP has no record key: the event's key is not sent. Publish may be
// called from several goroutines at once.
type OutboxSink struct {
	ch       *amqp.Channel
	exchange string

	returns chan amqp.Return
	takes   chan take
	done    chan struct{}
}

// take asks the return watcher for the returns of ids.
type take struct {
	ids   []string
	reply chan map[string]string
}

// OutboxSinkConfig configures an OutboxSink. The zero value is valid.
type OutboxSinkConfig struct {
	// Exchange is the exchange the events go to, with each event's topic
	// as the routing key. Defaults to "", RabbitMQ's default exchange,
	// where the topic is the name of the queue.
	Exchange string
}

var _ outbox.Sink = (*OutboxSink)(nil)

// NewOutboxSink puts ch, a channel the caller dedicates to the sink, in
// confirm mode and returns a sink over it. config may be nil.
func NewOutboxSink(ch *amqp.Channel, config *OutboxSinkConfig) (*OutboxSink, error) {
	if ch == nil {
		return nil, errors.New("inboxrabbit: NewOutboxSink: the channel is nil")
	}
	var cfg OutboxSinkConfig
	if config != nil {
		cfg = *config
	}
	if err := ch.Confirm(false); err != nil {
		return nil, fmt.Errorf("inboxrabbit: put the channel in confirm mode: %w", err)
	}
	s := &OutboxSink{
		ch: ch, exchange: cfg.Exchange,
		// Unbuffered: the client hands a return over before it reads the
		// confirm that follows it.
		returns: ch.NotifyReturn(make(chan amqp.Return)),
		takes:   make(chan take),
		done:    make(chan struct{}),
	}
	go s.watchReturns()
	return s, nil
}

// watchReturns records the returned messages by message id, and hands
// them over when asked. Being one goroutine, it has recorded every return
// it took before it answers: a return that the client handed over before a
// confirm is seen by a take that follows the confirm. Several Publish calls
// may be in flight; each takes only its own records' returns.
//
// A return that comes after its Publish stopped waiting (its context
// ended) stays recorded, and counts as a rejection of the event's next
// publish: one attempt of the budget, never a lost event.
func (s *OutboxSink) watchReturns() {
	defer close(s.done)
	returned := map[string]string{}
	for {
		select {
		case r, ok := <-s.returns:
			if !ok {
				return
			}
			returned[r.MessageId] = fmt.Sprintf("returned unroutable by exchange %q with routing key %q: %d %s", r.Exchange, r.RoutingKey, r.ReplyCode, r.ReplyText)
		case t := <-s.takes:
			got := map[string]string{}
			for _, id := range t.ids {
				if why, ok := returned[id]; ok {
					got[id] = why
					delete(returned, id)
				}
			}
			t.reply <- got
		}
	}
}

// returned takes the returns of ids recorded so far; false when the
// channel closed.
func (s *OutboxSink) returned(ids []string) (map[string]string, bool) {
	t := take{ids: ids, reply: make(chan map[string]string, 1)}
	select {
	case s.takes <- t:
		return <-t.reply, true
	case <-s.done:
		return nil, false
	}
}

// Publish implements outbox.Sink: it publishes every record, then waits for
// the broker's confirms.
func (s *OutboxSink) Publish(ctx context.Context, recs []outbox.Record) []error {
	errs := make([]error, len(recs))
	confirms := make([]*amqp.DeferredConfirmation, len(recs))
	for i, rec := range recs {
		headers := make(amqp.Table, len(rec.Headers))
		for k, v := range rec.Headers {
			headers[k] = v
		}
		c, err := s.ch.PublishWithDeferredConfirmWithContext(ctx, s.exchange, rec.Topic, true, false, amqp.Publishing{
			Headers: headers, DeliveryMode: amqp.Persistent, MessageId: rec.ID, Timestamp: rec.CreatedAt, Body: rec.Payload,
		})
		if err != nil {
			// The channel is closed, or ctx ended: this record and the
			// rest wait for the broker.
			for j := i; j < len(recs); j++ {
				errs[j] = outbox.Unavailable(fmt.Errorf("inboxrabbit: publish: %w", err))
			}
			break
		}
		confirms[i] = c
	}
	var ids []string
	for i, c := range confirms {
		if c == nil {
			continue
		}
		ids = append(ids, recs[i].ID)
		ack, err := c.WaitContext(ctx)
		switch {
		case err != nil:
			errs[i] = outbox.Unavailable(fmt.Errorf("inboxrabbit: no confirm: %w", err))
		case !ack && s.ch.IsClosed():
			errs[i] = outbox.Unavailable(errors.New("inboxrabbit: the channel closed before the broker confirmed"))
		case !ack:
			errs[i] = errors.New("inboxrabbit: the broker nacked the message")
		}
	}
	if len(ids) == 0 {
		return errs
	}
	returned, ok := s.returned(ids)
	for i, rec := range recs {
		if errs[i] != nil || confirms[i] == nil {
			continue
		}
		if !ok {
			errs[i] = outbox.Unavailable(errors.New("inboxrabbit: the channel closed before its returns were read"))
			continue
		}
		if why, ok := returned[rec.ID]; ok {
			errs[i] = fmt.Errorf("inboxrabbit: %s", why)
		}
	}
	return errs
}
