package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox/outbox"
)

func TestDefaultBackoff(t *testing.T) {
	for _, c := range []struct {
		n    int
		want time.Duration
	}{
		{0, time.Second}, {1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second},
		{9, 256 * time.Second}, {10, 5 * time.Minute}, {64, 5 * time.Minute}, {1 << 30, 5 * time.Minute},
	} {
		require.Equal(t, c.want, outbox.DefaultBackoff(c.n), "after %d rejections", c.n)
	}
}

func TestUnavailable(t *testing.T) {
	refused := errors.New("connection refused")
	require.Nil(t, outbox.Unavailable(nil))
	u := outbox.Unavailable(refused)
	require.True(t, errors.Is(u, outbox.ErrUnavailable))
	require.True(t, errors.Is(u, refused), "the cause is kept")
	require.Equal(t, u, outbox.Unavailable(u), "wrapping twice changes nothing")
	for _, c := range []struct {
		err  error
		want bool
	}{
		{refused, false},
		{u, true},
		{fmt.Errorf("send: %w", u), true},
		{context.DeadlineExceeded, true},
		{fmt.Errorf("produce: %w", context.Canceled), true},
		{errors.New("MESSAGE_TOO_LARGE"), false},
	} {
		require.Equal(t, c.want, outbox.IsUnavailable(c.err), "%v", c.err)
	}
}

func TestNewRelayChecksItsConfig(t *testing.T) {
	_, err := outbox.NewRelay(nil, &outbox.MemorySink{}, nil)
	require.ErrorContains(t, err, "store is nil")
}

func TestMemorySink(t *testing.T) {
	s := &outbox.MemorySink{Reject: func(r outbox.Record) error {
		if r.ID == "bad" {
			return errors.New("rejected")
		}
		return nil
	}}
	key := []byte("k")
	errs := s.Publish(context.Background(), []outbox.Record{{ID: "a", Key: key}, {ID: "bad"}, {ID: "b"}})
	require.NoError(t, errs[0])
	require.Error(t, errs[1])
	require.NoError(t, errs[2])
	key[0] = 'x'
	recs := s.Records()
	require.Len(t, recs, 2)
	require.Equal(t, "k", string(recs[0].Key), "the sink keeps copies")
	require.Equal(t, 2, s.Confirmed())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	errs = s.Publish(ctx, []outbox.Record{{ID: "c"}})
	require.True(t, outbox.IsUnavailable(errs[0]))
}

func TestMemorySinkStopsAKeyAtItsFirstFailure(t *testing.T) {
	var sink outbox.Sink = &outbox.MemorySink{Reject: func(r outbox.Record) error {
		if r.ID == "a2" {
			return errors.New("rejected")
		}
		return nil
	}}
	ks, ok := sink.(outbox.KeyOrderSink)
	require.True(t, ok, "MemorySink is a KeyOrderSink")
	require.True(t, ks.KeepsKeyOrder())
	a, b := []byte("a"), []byte("b")
	errs := sink.Publish(context.Background(), []outbox.Record{
		{ID: "a1", Key: a, KeySeq: 1}, {ID: "a2", Key: a, KeySeq: 2}, {ID: "b1", Key: b, KeySeq: 1},
		{ID: "a3", Key: a, KeySeq: 3}, {ID: "free", Key: a},
	})
	require.NoError(t, errs[0])
	require.ErrorContains(t, errs[1], "rejected")
	require.NoError(t, errs[2], "another key goes on")
	require.ErrorIs(t, errs[3], outbox.ErrKeyStopped)
	require.NoError(t, errs[4], "an unordered record is not stopped")
	var got []string
	for _, r := range sink.(*outbox.MemorySink).Records() {
		got = append(got, r.ID)
	}
	require.Equal(t, []string{"a1", "b1", "free"}, got)
}
