package inboxkafka

import (
	"fmt"
	"strconv"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/internal/uuid"
)

// offsetNamespace is the namespace of the name-based UUIDs of OffsetKey.
var offsetNamespace = [16]byte{0x6b, 0x61, 0x66, 0x6b, 0x61, 0x2d, 0x4f, 0x66, 0x8f, 0x73, 0x65, 0x74, 0x4b, 0x65, 0x79, 0x31}

// OffsetKey is a KeyFunc that names a record by where it sits, topic,
// partition and offset, instead of by the producer's event id. It returns a
// name-based UUID (version 5) of "topic/partition/offset", so it fits the
// default uuid id column; it does not fit IDFormatULID.
//
// It is an explicit opt-in, never a default, because it is only true for a
// consumer that never sees the same event at two coordinates, nor two
// events at the same coordinates. It lies:
//   - when an event is produced again onto a new offset: an outbox relay
//     that republishes after a crash or a bug fix, or a producer retry
//     without idempotence. The new offset is a new id, and the event is
//     applied twice;
//   - when a topic is restored or recreated: offsets restart, other events
//     take the old coordinates and are skipped as duplicates (lost), while
//     the old events come back at new offsets and are applied again;
//   - when consumption moves to a new consumer group on a mirrored or
//     migrated copy of the topic, whose offsets differ: every event is
//     applied again.
//
// Use it only for a topic whose producer can never emit an event twice and
// which is never rewritten, and prefer a producer event id in a header
// (inbox.HeaderKey) or in the payload (inbox.JSONKey).
func OffsetKey(msg inbox.Message) (string, error) {
	s := msg.Source
	if s.Transport != Transport || s.Queue == "" {
		return "", fmt.Errorf("%w: OffsetKey needs a Kafka record's coordinates, got %q", inbox.ErrNoMessageID, s.String())
	}
	if s.Partition < 0 || s.Offset < 0 {
		return "", fmt.Errorf("%w: OffsetKey: negative coordinates %q", inbox.ErrMalformedID, s.String())
	}
	name := s.Queue + "/" + strconv.FormatInt(int64(s.Partition), 10) + "/" + strconv.FormatInt(s.Offset, 10)
	return uuid.V5(offsetNamespace, name), nil
}
