package inboxrabbit

import (
	"fmt"

	"github.com/txinbox/inbox"
)

// MessageIDKey is a KeyFunc that reads the event id from the AMQP
// message-id property (inbox.Source.BrokerID of the messages this package
// delivers). The property is the publisher's, not the broker's: it is a
// sound key when the producer sets it to its event id, as an outbox relay
// does, and the same on every redelivery and every republish. RabbitMQ
// neither sets nor checks it, so a producer that leaves it empty gives
// ErrNoMessageID, and one that makes a new id per publish call gives a new
// id to a retried event.
func MessageIDKey(msg inbox.Message) (string, error) {
	if msg.Source.Transport != Transport {
		return "", fmt.Errorf("%w: MessageIDKey needs a RabbitMQ delivery, got %q", inbox.ErrNoMessageID, msg.Source.String())
	}
	if msg.Source.BrokerID == "" {
		return "", fmt.Errorf("%w: no message-id property", inbox.ErrNoMessageID)
	}
	return msg.Source.BrokerID, nil
}

var _ inbox.KeyFunc = MessageIDKey
