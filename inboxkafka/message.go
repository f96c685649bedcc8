package inboxkafka

import (
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxtransport"
)

// Transport is the inbox.Source.Transport of the messages of this package.
const Transport = "kafka"

// message converts a record to an inbox message with no id yet. Of headers
// that repeat a key, the last one wins.
func message(r *kgo.Record) inbox.Message {
	var headers map[string]string
	if len(r.Headers) > 0 {
		headers = make(map[string]string, len(r.Headers))
		for _, h := range r.Headers {
			headers[h.Key] = string(h.Value)
		}
	}
	return inbox.Message{
		Payload: r.Value,
		Headers: headers,
		Source: inbox.Source{
			Transport: Transport,
			Queue:     r.Topic,
			Partition: r.Partition,
			Offset:    r.Offset,
			Key:       r.Key,
		},
	}
}

// record is a record as the consumer holds it, with its message as the
// delivery policy sees it.
type record struct {
	rec *kgo.Record
	tr  inboxtransport.Delivery
}

// Delivery returns the record as the policy sees it.
func (r *record) Delivery() *inboxtransport.Delivery { return &r.tr }
