package inboxnats

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txinbox/inbox/outbox"
)

// OutboxSink publishes an outbox's events to JetStream with the caller's
// client: each event is a message on the subject that is the event's
// topic, with the event's headers, the event id among them
// (outbox.HeaderEventID), and the event id as its Nats-Msg-Id, so that the
// stream drops a relay's republish of it within its duplicate window. A
// consumer reads the id with inbox.HeaderKey(outbox.HeaderEventID), or
// with MsgIDKey.
//
// The messages of a batch are published asynchronously and the sink waits
// for every acknowledgement. An error that the stream answers (a message
// too large, a stream full that discards new messages) is a rejection of
// that event, as is a subject that no stream takes (no responders, after
// the client's retries), which the relay retries with backoff and parks
// after outbox.RelayConfig.MaxRejections. A connection that closed, or an
// acknowledgement that did not come in time, is the broker's
// unavailability, which costs no attempt.
//
// JetStream has no record key: the event's key is not sent. Give each key
// a subject of its own (in the topic) where a consumer needs it.
type OutboxSink struct {
	js jetstream.JetStream
}

var _ outbox.Sink = (*OutboxSink)(nil)

// NewOutboxSink returns a sink over js, the caller's JetStream context.
func NewOutboxSink(js jetstream.JetStream) *OutboxSink { return &OutboxSink{js: js} }

// Publish implements outbox.Sink.
func (s *OutboxSink) Publish(ctx context.Context, recs []outbox.Record) []error {
	errs := make([]error, len(recs))
	futures := make([]jetstream.PubAckFuture, len(recs))
	for i, rec := range recs {
		if err := ctx.Err(); err != nil {
			errs[i] = outbox.Unavailable(err)
			continue
		}
		m := nats.NewMsg(rec.Topic)
		m.Data = rec.Payload
		for k, v := range rec.Headers {
			m.Header.Set(k, v)
		}
		f, err := s.js.PublishMsgAsync(m, jetstream.WithMsgID(rec.ID))
		if err != nil {
			errs[i] = classifyPublish(err)
			continue
		}
		futures[i] = f
	}
	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case <-f.Ok():
		case err := <-f.Err():
			errs[i] = classifyPublish(err)
		case <-ctx.Done():
			errs[i] = outbox.Unavailable(fmt.Errorf("inboxnats: no acknowledgement: %w", ctx.Err()))
		}
	}
	return errs
}

// classifyPublish tells the relay whose fault a publish error is.
func classifyPublish(err error) error {
	var apiErr *jetstream.APIError
	switch {
	case errors.As(err, &apiErr):
		return err // the stream refused the message
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrNoResponders):
		return fmt.Errorf("inboxnats: no stream takes the subject: %w", err)
	case errors.Is(err, nats.ErrBadSubject), errors.Is(err, nats.ErrMaxPayload), errors.Is(err, nats.ErrBadHeaderMsg):
		return err
	}
	return outbox.Unavailable(err)
}
