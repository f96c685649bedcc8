package inboxrabbit

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxtransport"
)

// Transport is the inbox.Source.Transport of the messages this package
// delivers.
const Transport = "rabbitmq"

// headerDeliveryCount is the header in which quorum queues count a
// message's earlier deliveries.
const headerDeliveryCount = "x-delivery-count"

// delivery is one delivery while the consumer holds it: from its arrival
// until it is acknowledged, nacked, or left to its closing channel.
type delivery struct {
	raw  amqp.Delivery
	sess *session // the channel it arrived on, which alone can ack it
	// tr is its message; Source.Attempt is the quorum queue's delivery
	// count, this delivery included, or 0 when the broker keeps none
	// (classic queues).
	tr inboxtransport.Delivery
}

// newDelivery wraps d, which arrived on sess from queue. The message's
// Source holds the queue as Queue, the message-id property as BrokerID and
// the routing key as Key; its headers are d's, as text (see headerText).
func newDelivery(queue string, sess *session, d amqp.Delivery) *delivery {
	count := deliveryCount(d.Headers)
	return &delivery{
		raw:  d,
		sess: sess,
		tr: inboxtransport.Delivery{Message: inbox.Message{
			Payload: d.Body,
			Headers: headers(d.Headers),
			Source: inbox.Source{
				Transport:   Transport,
				Queue:       queue,
				BrokerID:    d.MessageId,
				Key:         []byte(d.RoutingKey),
				Redelivered: d.Redelivered || count > 1,
				Attempt:     count,
			},
		}},
	}
}

// Delivery returns the delivery as the policy sees it.
func (d *delivery) Delivery() *inboxtransport.Delivery { return &d.tr }

// deliveryCount reads a quorum queue's x-delivery-count (earlier
// deliveries) and returns the count of this delivery, or 0 when there is
// none (a classic queue, or a quorum queue's first delivery, which the
// caller cannot tell apart from the header alone).
func deliveryCount(h amqp.Table) int {
	v, ok := h[headerDeliveryCount]
	if !ok {
		return 0
	}
	var n int64
	switch x := v.(type) {
	case int64:
		n = x
	case int32:
		n = int64(x)
	case int16:
		n = int64(x)
	case int8:
		n = int64(x)
	case int:
		n = int64(x)
	case uint8:
		n = int64(x)
	case uint16:
		n = int64(x)
	case uint32:
		n = int64(x)
	default:
		return 0
	}
	if n < 0 || n >= 1<<31-1 {
		return 0
	}
	return int(n) + 1
}

// headers turns AMQP headers into inbox headers, as text.
func headers(h amqp.Table) map[string]string {
	if len(h) == 0 {
		return nil
	}
	out := make(map[string]string, len(h))
	for name, v := range h {
		out[name] = headerText(v)
	}
	return out
}

// headerText writes an AMQP field value as text: strings as they are, byte
// arrays as they are when they are UTF-8 and in standard base64 otherwise,
// numbers and booleans in Go's notation, timestamps in RFC 3339, nested
// tables and arrays with fmt.
func headerText(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case []byte:
		if utf8.Valid(x) {
			return string(x)
		}
		return base64.StdEncoding.EncodeToString(x)
	case bool:
		return strconv.FormatBool(x)
	case int8, int16, int32, int64, int, uint8, uint16, uint32, uint64, float32, float64:
		return fmt.Sprint(x)
	case time.Time:
		return x.UTC().Format(time.RFC3339)
	default:
		return fmt.Sprint(x)
	}
}
