package inboxwatermill

import (
	"context"
	"fmt"
	"maps"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/txinbox/inbox/outbox"
)

// SinkConfig configures a Sink. The zero value is valid.
type SinkConfig struct {
	// Unavailable reports whether a publisher's error means the broker
	// could not be reached, so that the relay tries the record again
	// without counting it against RelayConfig.MaxRejections. Defaults to
	// nil: every error but a context's end is a rejection of the record.
	Unavailable func(err error) bool

	// KeyMetadata, if set, names the metadata field that carries the
	// record's key, for a marshaler that partitions by it (such as
	// watermill-kafka's partitioning marshaler). Defaults to "": the key
	// is not sent.
	KeyMetadata string
}

// Sink is an outbox.Sink over any Watermill publisher: with it the
// outbox's relays publish to AMQP, Kafka, NATS, Google Pub/Sub, Redis
// Streams, SQL or Go channels. Each record becomes a message whose UUID is
// the event id and whose metadata are the record's headers, with
// outbox.HeaderEventID among them, so a consumer keys on either (KeyUUID,
// or KeyMetadata(outbox.HeaderEventID)). Records are published one
// Publish call each, so that each has its own answer; Watermill publishers
// return once the broker confirmed, as a sink must.
type Sink struct {
	pub    message.Publisher
	config SinkConfig
}

var _ outbox.Sink = (*Sink)(nil)

// NewSink returns a Sink over pub. config may be nil.
func NewSink(pub message.Publisher, config *SinkConfig) *Sink {
	s := &Sink{pub: pub}
	if config != nil {
		s.config = *config
	}
	return s
}

// Publish implements outbox.Sink.
func (s *Sink) Publish(ctx context.Context, recs []outbox.Record) []error {
	errs := make([]error, len(recs))
	for i, rec := range recs {
		if err := ctx.Err(); err != nil {
			errs[i] = err
			continue
		}
		m := message.NewMessage(rec.ID, rec.Payload)
		m.Metadata = maps.Clone(rec.Headers)
		if m.Metadata == nil {
			m.Metadata = message.Metadata{}
		}
		if s.config.KeyMetadata != "" && len(rec.Key) > 0 {
			m.Metadata.Set(s.config.KeyMetadata, string(rec.Key))
		}
		m.SetContext(ctx)
		err := s.pub.Publish(rec.Topic, m)
		if err != nil {
			err = fmt.Errorf("inboxwatermill: publish %s to %s: %w", rec.ID, rec.Topic, err)
			if s.config.Unavailable != nil && s.config.Unavailable(err) {
				err = outbox.Unavailable(err)
			}
		}
		errs[i] = err
	}
	return errs
}
