package inboxrabbit

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxtransport"
)

// settleTimeout bounds each dead-letter write that settles a message. It
// runs even after Run's context is done.
const settleTimeout = 10 * time.Second

// Consumer consumes a RabbitMQ queue and applies each message exactly once
// through an inbox client: it acknowledges a delivery only after the
// transaction that recorded it committed, and only on the channel it
// arrived on. Create one with New and start it with Run.
type Consumer[TTx any] struct {
	dial    DialFunc
	client  *inbox.Client[TTx]
	handler inbox.Handler[TTx]
	config  Config
	logger  *slog.Logger
	gen     atomic.Uint64

	// policy keys, processes, judges and dead-letters the deliveries, and
	// counts each event's failed attempts (classic queues count no
	// deliveries) and the deliveries that were not attempts (a quorum
	// queue's x-delivery-count includes them).
	policy *inboxtransport.Policy[TTx, *delivery]

	running atomic.Bool
}

// New returns a consumer of config.Queue that applies each message with
// handler through client. dial opens its connections, with the caller's
// URL, credentials and TLS (DialURL for the common case); it is called
// again, with a backoff, whenever the connection or the channel is lost.
// config is required: Queue, Consumer and Key have no default.
func New[TTx any](dial DialFunc, client *inbox.Client[TTx], handler inbox.Handler[TTx], config *Config) (*Consumer[TTx], error) {
	switch {
	case dial == nil:
		return nil, errors.New("inboxrabbit: New: dial is nil")
	case client == nil:
		return nil, errors.New("inboxrabbit: New: inbox client is nil")
	case handler == nil:
		return nil, errors.New("inboxrabbit: New: handler is nil")
	case config == nil:
		return nil, errors.New("inboxrabbit: New: config is nil: Queue, Consumer and Key are required")
	}
	cfg := config.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	c := &Consumer[TTx]{
		dial:    dial,
		client:  client,
		handler: handler,
		config:  cfg,
		logger:  logger,
	}
	policy, err := inboxtransport.NewPolicy(inboxtransport.Config[TTx, *delivery]{
		Client:          client,
		Handler:         handler,
		Consumer:        cfg.Consumer,
		Key:             cfg.Key,
		MaxAttempts:     cfg.MaxDeliveries,
		RetryBackoff:    cfg.RetryBackoff,
		MaxRetryBackoff: cfg.MaxRetryBackoff,
		Name:            "inboxrabbit",
		Logger:          logger,
		DeadLetter:      deadLetter,
	})
	if err != nil {
		return nil, err
	}
	c.policy = policy
	return c, nil
}

// Breaker returns the consumer's Breaker, whose State shows a store
// outage or an open streak breaker.
func (c *Consumer[TTx]) Breaker() *inboxtransport.Breaker { return c.policy.Breaker() }

// Config returns the consumer's configuration with defaults applied.
func (c *Consumer[TTx]) Config() Config { return c.config }

// Run consumes the queue until ctx is done, then shuts down gracefully:
//
//  1. it stops taking deliveries;
//  2. deliveries being processed get Config.ShutdownTimeout to finish and
//     be acknowledged; after that their contexts are cancelled and they
//     roll back;
//  3. it closes its channel and connection, which requeues every delivery
//     not acknowledged (those prefetched, held for a retry, or cancelled);
//  4. it returns nil once every goroutine it started has ended.
//
// A lost connection or channel, and a failed dial, are logged and followed
// by a new dial after a backoff; errors of the store are logged and
// retried. Run returns an error only if the consumer is already running.
func (c *Consumer[TTx]) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return errors.New("inboxrabbit: Run: the consumer is already running")
	}
	defer c.running.Store(false)

	// Work in progress gets ShutdownTimeout to finish.
	workCtx, finish := inboxtransport.WorkContext(ctx, c.config.ShutdownTimeout)
	defer finish()

	backoff := c.config.ReconnectBackoff
	for ctx.Err() == nil {
		s, err := c.connect(ctx)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			c.logger.WarnContext(ctx, "inboxrabbit: could not start consuming; trying again",
				"queue", c.config.Queue, "backoff", backoff, "err", err)
			inboxtransport.Sleep(ctx, backoff)
			backoff = min(backoff*2, c.config.MaxReconnectBackoff)
			continue
		}
		backoff = c.config.ReconnectBackoff
		c.consume(ctx, workCtx, s)
		s.close()
		if ctx.Err() == nil {
			c.logger.InfoContext(ctx, "inboxrabbit: reconnecting", "queue", c.config.Queue, "backoff", backoff)
			inboxtransport.Sleep(ctx, backoff)
		}
	}
	return nil
}

// consume runs the workers on s until s dies or ctx is done, and waits
// for the batches in progress.
func (c *Consumer[TTx]) consume(ctx, workCtx context.Context, s *session) {
	var wg sync.WaitGroup
	for range c.config.Workers {
		wg.Go(func() {
			for {
				c.policy.Wait(ctx)
				ds := c.take(ctx, s)
				if len(ds) == 0 {
					return
				}
				for len(ds) > 0 {
					var wait time.Duration
					ds, wait = c.process(workCtx, ds)
					// While the streak breaker is open, a retry in
					// place waits out its pause too.
					if len(ds) > 0 && !c.hold(ctx, s, max(wait, c.policy.Breaker().Paused())) {
						// Left to the closing channel, which
						// requeues them.
						return
					}
				}
			}
		})
	}
	wg.Wait()
}

// hold waits d before an ordered retry in place, and reports false if ctx
// was done or s died first.
func (c *Consumer[TTx]) hold(ctx context.Context, s *session, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-s.done:
		return false
	}
}

// take waits for a delivery on s and returns it with those already waiting
// behind it, up to Batch. It returns nil when ctx is done or s died.
func (c *Consumer[TTx]) take(ctx context.Context, s *session) []*delivery {
	var first *delivery
	select {
	case <-ctx.Done():
		return nil
	case <-s.done:
		return nil
	case d, ok := <-s.ready:
		if !ok {
			return nil
		}
		first = newDelivery(c.config.Queue, s, d)
	}
	ds := []*delivery{first}
	for len(ds) < c.config.Batch {
		select {
		case d, ok := <-s.ready:
			if !ok {
				return ds
			}
			ds = append(ds, newDelivery(c.config.Queue, s, d))
		default:
			return ds
		}
	}
	return ds
}
