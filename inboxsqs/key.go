package inboxsqs

import (
	"fmt"

	"github.com/txinbox/inbox"
)

// MessageIDKey is a KeyFunc that uses the SQS MessageId as the event id.
// It is an explicit opt-in, never a default, because it lies whenever one
// event can be sent twice:
//
//   - A producer that retried a SendMessage (a timeout after SQS had
//     accepted the first send) made two messages with two MessageIds for
//     one event; both are applied.
//   - An outbox relay that republished after a crash, a replay from an
//     archive, a copy moved back from a dead-letter queue: each is a new
//     message with a new MessageId.
//   - Standard queues do not deduplicate sends, and FIFO deduplication
//     lasts five minutes.
//
// A MessageId is stable only across the receives of one message, which
// makes it enough for "this receipt came back" and nothing more. Put the
// producer's event id in the body or an attribute and read it with
// inbox.JSONKey or inbox.HeaderKey instead.
func MessageIDKey(msg inbox.Message) (string, error) {
	if msg.Source.BrokerID == "" {
		return "", fmt.Errorf("%w: no SQS MessageId", inbox.ErrNoMessageID)
	}
	return msg.Source.BrokerID, nil
}

var _ inbox.KeyFunc = MessageIDKey
