package inboxnats

import (
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxtransport"
)

// Transport is the inbox.Source.Transport of the messages this package
// delivers.
const Transport = "nats"

// delivery is one fetched message while the consumer holds it: from the
// fetch until it is acknowledged, naked or terminated.
type delivery struct {
	raw       jetstream.Msg
	tr        inboxtransport.Delivery // its message; ID is empty until the KeyFunc ran
	delivered int                     // NumDelivered
}

// newDelivery wraps m. The message's Source holds the stream as Queue,
// the stream sequence as Offset, and the subject as Key.
func newDelivery(stream string, m jetstream.Msg) *delivery {
	d := &delivery{
		raw: m,
		tr: inboxtransport.Delivery{Message: inbox.Message{
			Payload: m.Data(),
			Headers: headers(m.Headers()),
			Source: inbox.Source{
				Transport: Transport,
				Queue:     stream,
				Key:       []byte(m.Subject()),
			},
		}},
		delivered: 1,
	}
	src := &d.tr.Message.Source
	if md, err := m.Metadata(); err == nil {
		src.Queue = md.Stream
		src.Offset = int64(min(md.Sequence.Stream, 1<<63-1))
		if md.NumDelivered > 0 {
			d.delivered = int(min(md.NumDelivered, 1<<31-1))
		}
		// The stream sequence names the message across its deliveries.
		if src.Offset > 0 {
			d.tr.Track = src.Queue + "/" + strconv.FormatInt(src.Offset, 10)
		}
	}
	src.Attempt, src.Redelivered = d.delivered, d.delivered > 1
	return d
}

// Delivery returns the delivery as the policy sees it.
func (d *delivery) Delivery() *inboxtransport.Delivery { return &d.tr }

// headers turns NATS headers into inbox headers: each header's first value,
// under the name as it was sent (NATS header names are case-sensitive).
func headers(h nats.Header) map[string]string {
	if len(h) == 0 {
		return nil
	}
	out := make(map[string]string, len(h))
	for name, vs := range h {
		if len(vs) > 0 {
			out[name] = vs[0]
		}
	}
	return out
}
