package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/txinbox/inbox/internal/require"
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
