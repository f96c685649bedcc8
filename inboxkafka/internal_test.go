package inboxkafka

import (
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stretchr/testify/require"
)

// TestLateMarksAreFenced: a mark from the worker of an earlier assignment
// of a partition, or from a worker whose partition was revoked, changes
// nothing; marks never move an offset backwards.
func TestLateMarksAreFenced(t *testing.T) {
	t.Parallel()
	c := &Consumer[struct{}]{
		parts:     make(map[topicPartition]*partition),
		commitKey: make(chan struct{}, 1),
		logger:    slog.New(slog.DiscardHandler),
	}
	tp := topicPartition{"orders", 0}
	earlier := newPartition(context.Background(), tp, 1)
	defer earlier.cancel()
	current := newPartition(context.Background(), tp, 2)
	defer current.cancel()
	c.parts[tp] = current

	c.mark(current, &kgo.Record{Offset: 9, LeaderEpoch: 3})
	require.Equal(t, kgo.EpochOffset{Epoch: 3, Offset: 10}, current.next)
	require.Len(t, c.commitKey, 1, "a mark asks for a commit")
	<-c.commitKey

	c.mark(earlier, &kgo.Record{Offset: 41})
	require.Equal(t, int64(10), current.next.Offset, "a late mark of the earlier assignment moved the offset")
	require.Zero(t, earlier.next.Offset)
	require.Empty(t, c.commitKey, "a fenced mark asked for a commit")

	c.mark(current, &kgo.Record{Offset: 4})
	require.Equal(t, int64(10), current.next.Offset, "a mark moved the offset backwards")

	c.remove([]*partition{current})
	c.mark(current, &kgo.Record{Offset: 20})
	require.Equal(t, int64(10), current.next.Offset, "a mark after the revoke moved the offset")
	require.Empty(t, c.parts)
}

// TestCheckClientAcceptsAutoCommitMarks: auto-commit limited to marked
// records is safe, since the consumer never marks through kgo.
func TestCheckClientAcceptsAutoCommitMarks(t *testing.T) {
	t.Parallel()
	b := &binding{}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers("127.0.0.1:1"),
		kgo.ConsumerGroup("g"),
		kgo.ConsumeTopics("orders"),
		kgo.AutoCommitMarks(),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsRevoked(b.onRevoked),
		kgo.OnPartitionsLost(b.onLost),
		kgo.WithHooks(b),
	)
	require.NoError(t, err)
	defer cl.Close()
	got, err := checkClient(cl, "")
	require.NoError(t, err)
	require.Same(t, b, got)
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	b := backoff{min: 10 * time.Millisecond, max: 80 * time.Millisecond}
	for _, bound := range []time.Duration{10, 20, 40, 80, 80, 80} {
		bound *= time.Millisecond
		d := b.next()
		require.GreaterOrEqual(t, d, bound/2)
		require.LessOrEqual(t, d, bound)
	}
	b.reset()
	d := b.next()
	require.GreaterOrEqual(t, d, 5*time.Millisecond)
	require.LessOrEqual(t, d, 10*time.Millisecond)
}

// TestQueuedRecords: enqueue makes each record's message as it queues it;
// the records of the first fetch after an assignment are marked as maybe
// delivered before (to the partition's previous owner), later ones are
// not; and each attempt takes a fresh copy, with no settled state.
func TestQueuedRecords(t *testing.T) {
	t.Parallel()
	p := newPartition(context.Background(), topicPartition{"orders", 3}, 7)
	defer p.cancel()
	rec := func(offset int64) *kgo.Record {
		return &kgo.Record{Topic: "orders", Partition: 3, Offset: offset, Value: []byte("v"),
			Headers: []kgo.RecordHeader{{Key: "event-id", Value: []byte("e")}}}
	}
	p.enqueue([]*kgo.Record{rec(10), rec(11)}, 100, func() { t.Fatal("paused under the limit") })
	p.enqueue([]*kgo.Record{rec(12)}, 100, func() { t.Fatal("paused under the limit") })
	batch, ok := p.take(10, 100, func() {})
	require.True(t, ok)
	require.Len(t, batch, 3)
	for i, want := range []bool{true, true, false} {
		m := batch[i].tr.Message
		require.Equal(t, want, m.Source.Redelivered, "offset %d", m.Source.Offset)
		require.Equal(t, int64(10+i), m.Source.Offset)
		require.Equal(t, map[string]string{"event-id": "e"}, m.Headers)
		require.Equal(t, "kafka:orders/3#7@"+strconv.Itoa(10+i), batch[i].tr.Track)
	}
	first := batch[0].fresh()
	first.tr.Message.ID = "changed"
	require.True(t, first.tr.Message.Source.Redelivered)
	require.Empty(t, batch[0].tr.Message.ID, "an attempt's copy changed the queued record")
	require.NotSame(t, first, batch[0].fresh())
}
