package broker

import (
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Header is the delivery's header name: a Kafka record header, a NATS
// header, a RabbitMQ header. Empty when it has none.
func (d *Delivery) Header(name string) string {
	switch m := d.raw.(type) {
	case *kgo.Record:
		for _, h := range m.Headers {
			if h.Key == name {
				return string(h.Value)
			}
		}
	case jetstream.Msg:
		return m.Headers().Get(name)
	case amqp.Delivery:
		switch v := m.Headers[name].(type) {
		case nil:
		case string:
			return v
		default:
			return fmt.Sprint(v)
		}
	}
	return ""
}

// Key is the broker's own name for the delivery: topic/partition/offset
// on Kafka, stream/sequence on NATS, delivery-tag/N on RabbitMQ (which
// numbers the deliveries of one channel from 1, again on each new one).
func (d *Delivery) Key() string {
	switch m := d.raw.(type) {
	case *kgo.Record:
		return fmt.Sprintf("%s/%d/%d", m.Topic, m.Partition, m.Offset)
	case jetstream.Msg:
		md, err := m.Metadata()
		if err != nil {
			return ""
		}
		return fmt.Sprintf("%s/%d", md.Stream, md.Sequence.Stream)
	case amqp.Delivery:
		return "delivery-tag/" + strconv.FormatUint(m.DeliveryTag, 10)
	}
	return ""
}
