package redis_test

import (
	"context"
	"errors"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox/cmd/inboxlab/internal/redis"
	"github.com/txinbox/inbox/internal/testdb"
)

// addr is the machine's Redis, as 'inboxlab bench' uses it.
const addr = "127.0.0.1:6379"

func dial(t *testing.T, size int) *redis.Client {
	t.Helper()
	c, err := redis.Dial(context.Background(), addr, size)
	testdb.Require(t, "Redis at "+addr, err)
	t.Cleanup(c.Close)
	return c
}

func TestCommands(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := dial(t, 2)
	prefix := "inbox-redis-test:" + testdb.RandomSuffix() + ":"

	first, err := c.SetNX(ctx, prefix+"a", "1", time.Hour)
	require.NoError(t, err)
	require.True(t, first)
	first, err = c.SetNX(ctx, prefix+"a", "1", time.Hour)
	require.NoError(t, err)
	require.False(t, first, "the second SET NX of a key finds it")
	ttl, err := c.Do(ctx, "PTTL", prefix+"a")
	require.NoError(t, err)
	require.Greater(t, ttl.(int64), int64(0), "the key expires")
	require.LessOrEqual(t, ttl.(int64), int64(time.Hour/time.Millisecond))

	for _, k := range []string{"b", "c\r\nd", ""} { // keys are binary-safe
		first, err := c.SetNX(ctx, prefix+k, "x", time.Hour)
		require.NoError(t, err)
		require.True(t, first, "%q", k)
	}
	var keys []string
	var cursor uint64
	for range 10_000 {
		page, next, err := c.Scan(ctx, cursor, prefix+"*", 2)
		require.NoError(t, err)
		keys = append(keys, page...)
		if cursor = next; cursor == 0 {
			break
		}
	}
	require.Zero(t, cursor, "SCAN did not finish")
	slices.Sort(keys)
	keys = slices.Compact(keys)
	require.Equal(t, []string{prefix, prefix + "a", prefix + "b", prefix + "c\r\nd"}, keys)
	n, err := c.Unlink(ctx, keys...)
	require.NoError(t, err)
	require.Equal(t, int64(4), n)
	page, _, err := c.Scan(ctx, 0, prefix+"*", 1000)
	require.NoError(t, err)
	require.Empty(t, page)

	// An error reply is an error of the command, and the connection stays
	// usable.
	_, err = c.Do(ctx, "NO-SUCH-COMMAND")
	var re redis.Error
	require.ErrorAs(t, err, &re)
	require.Contains(t, err.Error(), "unknown command")
	reply, err := c.Do(ctx, "PING")
	require.NoError(t, err)
	require.Equal(t, "PONG", reply)
}

func TestCancelled(t *testing.T) {
	t.Parallel()
	c := dial(t, 1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := c.Do(ctx, "PING")
	require.ErrorIs(t, err, context.Canceled)
	// The pool still has its connection.
	reply, err := c.Do(context.Background(), "PING")
	require.NoError(t, err)
	require.Equal(t, "PONG", reply)
}

func TestUnreachable(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	a := l.Addr().String()
	l.Close() // nothing listens there now
	_, err = redis.Dial(context.Background(), a, 1)
	require.Error(t, err)
	var ne *net.OpError
	require.True(t, errors.As(err, &ne), "a dial error: %v", err)
}
