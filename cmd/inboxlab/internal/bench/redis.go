package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/txinbox/inbox/cmd/inboxlab/internal/redis"
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
			if err := b.redis.deleteKeys(dctx); err != nil {
				b.logf("delete Redis keys %s*: %v", b.redis.prefix, err)
			}
			c.Close()
		}, nil
	},
}

// deleteKeys deletes the run's keys, a scan page at a time, until the scan
// ends or ctx does.
func (s *redisStore) deleteKeys(ctx context.Context) error {
	var cursor uint64
	for {
		keys, next, err := s.client.Scan(ctx, cursor, s.prefix+"*", 1000)
		if err != nil {
			return err
		}
		if len(keys) > 0 {
			if _, err := s.client.Unlink(ctx, keys...); err != nil {
				return err
			}
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}
