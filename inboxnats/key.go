package inboxnats

import (
	"fmt"
	"strconv"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/internal/uuid"
)

// HeaderMsgID is the header a JetStream publish names its message with
// (jetstream.WithMsgID); the server drops a second publish of the same id
// within the stream's Duplicates window.
const HeaderMsgID = "Nats-Msg-Id"

// MsgIDKey is a KeyFunc that reads the event id from the Nats-Msg-Id header.
// It is a sound key when the producer sets that header to its own event id
// (an outbox relay that publishes with jetstream.WithMsgID(eventID)): the
// id is the producer's, the same on every delivery and every republish,
// and the server also drops republishes within the stream's Duplicates
// window (two minutes by default) before they reach any consumer. Past
// that window a republish is stored again, and the inbox skips it. It is
// wrong when the producer lets its client make a Nats-Msg-Id per publish
// call, which is a new id for a retried event.
func MsgIDKey(msg inbox.Message) (string, error) {
	return inbox.HeaderKey(HeaderMsgID)(msg)
}

var _ inbox.KeyFunc = MsgIDKey

// sequenceNamespace is the namespace of the name-based UUIDs of
// StreamSequenceKey.
var sequenceNamespace = [16]byte{0x6e, 0x61, 0x74, 0x73, 0x2d, 0x53, 0x65, 0x71, 0x8a, 0x75, 0x65, 0x6e, 0x63, 0x65, 0x4b, 0x31}

// StreamSequenceKey is a KeyFunc that names a message by where it sits, its
// stream and stream sequence, instead of by the producer's event id. It
// returns a name-based UUID (version 5) of "stream/sequence", so it fits
// the default uuid id column.
//
// It is an explicit opt-in, never a default, because it only tells that the
// same stored message came back (a redelivery after a crash, a Nak, an
// AckWait that ran out). It lies:
//   - on a republish: a producer that retried a publish whose answer it
//     did not get, or an outbox relay that publishes again after a crash,
//     stores the event again under a new sequence (past the stream's
//     Duplicates window, or without Nats-Msg-Id), and it is applied twice;
//   - when a stream is recreated, restored or mirrored: sequences restart
//     or differ, other events take the old sequences and are skipped as
//     duplicates (lost), and old events come back under new ones.
//
// Prefer the producer's event id in a header (outbox.HeaderEventID, or
// Nats-Msg-Id with MsgIDKey) or in the payload (inbox.JSONKey).
func StreamSequenceKey(msg inbox.Message) (string, error) {
	s := msg.Source
	if s.Transport != Transport || s.Queue == "" || s.Offset <= 0 {
		return "", fmt.Errorf("%w: StreamSequenceKey needs a JetStream message's stream and sequence, got %q", inbox.ErrNoMessageID, s.String())
	}
	return uuid.V5(sequenceNamespace, s.Queue+"/"+strconv.FormatInt(s.Offset, 10)), nil
}

var _ inbox.KeyFunc = StreamSequenceKey
