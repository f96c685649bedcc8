package inboxkafka_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxkafka"
)

func TestOffsetKey(t *testing.T) {
	t.Parallel()
	at := func(topic string, partition int32, offset int64) inbox.Message {
		return inbox.Message{Source: inbox.Source{Transport: inboxkafka.Transport, Queue: topic, Partition: partition, Offset: offset}}
	}
	a, err := inboxkafka.OffsetKey(at("orders", 3, 1207))
	require.NoError(t, err)
	again, err := inboxkafka.OffsetKey(at("orders", 3, 1207))
	require.NoError(t, err)
	require.Equal(t, a, again, "the same coordinates give the same key")
	canon, err := inbox.IDFormatUUID.CanonicalID(a)
	require.NoError(t, err, "the key fits a uuid column")
	require.Equal(t, canon, a)
	require.Equal(t, byte('5'), a[14], "a name-based UUID, version 5")

	seen := map[string]bool{a: true}
	for _, m := range []inbox.Message{at("orders", 3, 1208), at("orders", 4, 1207), at("orders2", 3, 1207), at("order", 31, 207)} {
		k, err := inboxkafka.OffsetKey(m)
		require.NoError(t, err)
		require.False(t, seen[k], "coordinates %v share a key", m.Source)
		seen[k] = true
	}

	// The lie it documents: the same event republished at a new offset
	// gets a new key.
	republished, err := inboxkafka.OffsetKey(at("orders", 3, 5000))
	require.NoError(t, err)
	require.NotEqual(t, a, republished)

	_, err = inboxkafka.OffsetKey(inbox.Message{})
	require.ErrorIs(t, err, inbox.ErrNoMessageID)
	_, err = inboxkafka.OffsetKey(inbox.Message{Source: inbox.Source{Transport: "sqs", Queue: "q", BrokerID: "m"}})
	require.ErrorIs(t, err, inbox.ErrNoMessageID)
	_, err = inboxkafka.OffsetKey(at("orders", -1, 0))
	require.ErrorIs(t, err, inbox.ErrMalformedID)
}
