package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/txinbox/inbox/cmd/inboxlab/internal/redis"
	"github.com/txinbox/inbox/internal/command"
)

// redisTTL is the expiry of the redis-setnx row's keys, as a user sets one
// so that the set does not grow for ever: the trap of this pattern, since a
// key that expired before a replay forgets the skip.
const redisTTL = 24 * time.Hour

// redisStore is the Redis of the redis-setnx row.
type redisStore struct {
	client *redis.Client
	// prefix starts every key of the run, so that they can be deleted.
	prefix string
}

// redisResource opens a client with as many connections as the Postgres
// pool has, and deletes the run's keys when it closes.
var redisResource = &resource{
	name: "redis",
	open: func(ctx context.Context, b *bench) (func(), error) {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		c, err := redis.Dial(pctx, b.cfg.RedisAddr, b.maxW)
		if err != nil {
			return nil, fmt.Errorf("cannot reach Redis at %s (leave the redis-setnx row out with an empty --redis-addr): %w", b.cfg.RedisAddr, err)
		}
		b.redis = &redisStore{client: c, prefix: "inbox-bench:" + b.schema + ":"}
		return func() {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 60*time.Second)
			defer cancel()
			n, err := b.redis.deleteKeys(dctx)
			if err != nil {
				b.logf("delete Redis keys %s*: %v", b.redis.prefix, err)
				command.Cleaned(ctx, "could not delete Redis keys %s* (%s)", b.redis.prefix, command.Message(err))
			} else {
				command.Cleaned(ctx, "deleted %s %s*", command.Count(n, "Redis key", "Redis keys"), b.redis.prefix)
			}
			c.Close()
		}, nil
	},
}

// deleteKeys deletes the run's keys, a scan page at a time, until the scan
// ends or ctx does, and returns how many it deleted.
func (s *redisStore) deleteKeys(ctx context.Context) (int64, error) {
	var cursor uint64
	var deleted int64
	for {
		keys, next, err := s.client.Scan(ctx, cursor, s.prefix+"*", 1000)
		if err != nil {
			return deleted, err
		}
		if len(keys) > 0 {
			n, err := s.client.Unlink(ctx, keys...)
			deleted += n
			if err != nil {
				return deleted, err
			}
		}
		if next == 0 {
			return deleted, nil
		}
		cursor = next
	}
}
