package inboxnats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxtransport"
)

// ErrClosed is returned by Run when the NATS connection under it was
// closed: nothing can be fetched or acknowledged any more.
var ErrClosed = errors.New("inboxnats: the NATS connection was closed")

// settleTimeout bounds each DoubleAck and dead-letter write that settles a
// message. They run even after Run's context is done, so that work that
// committed is acknowledged during a shutdown.
const settleTimeout = 10 * time.Second

// Fetch errors pause the worker, doubling from the first to the last.
const (
	fetchErrorBackoff    = 100 * time.Millisecond
	maxFetchErrorBackoff = 10 * time.Second
)

// Consumer fetches messages from a JetStream pull consumer and applies each
// exactly once through an inbox client: it acknowledges a message only
// after the transaction that recorded it committed, and terminates one only
// after it was dead-lettered. Create one with New and start it with Run.
type Consumer[TTx any] struct {
	js      jetstream.JetStream
	client  *inbox.Client[TTx]
	handler inbox.Handler[TTx]
	config  Config
	logger  *slog.Logger
	leases  *leases

	// maxDeliver and beat are Config's, completed from the JetStream
	// consumer's configuration by Run before it starts its goroutines;
	// serverMaxDeliver is the JetStream consumer's own MaxDeliver, or 0
	// when it sets none.
	maxDeliver       int
	serverMaxDeliver int
	beat             time.Duration

	// breaker judges failures and keeps the consumer's outage and streak.
	breaker *inboxtransport.Breaker
	// policy keys, processes, judges and dead-letters what is fetched,
	// and counts each message's deliveries that were not attempts, which
	// NumDelivered includes. Run makes it, with maxDeliver.
	policy *inboxtransport.Policy[TTx, *delivery]

	running atomic.Bool
}

// New returns a consumer of the JetStream pull consumer config.Durable on
// config.Stream, through js, the caller's JetStream context over its
// configured connection, that applies each message with handler through
// client. config is required: Stream, Durable, Consumer and Key have no
// default. The NATS connection's own reconnect options decide how a lost
// connection is re-established; Run keeps fetching once it is.
func New[TTx any](js jetstream.JetStream, client *inbox.Client[TTx], handler inbox.Handler[TTx], config *Config) (*Consumer[TTx], error) {
	switch {
	case js == nil:
		return nil, errors.New("inboxnats: New: JetStream is nil")
	case client == nil:
		return nil, errors.New("inboxnats: New: inbox client is nil")
	case handler == nil:
		return nil, errors.New("inboxnats: New: handler is nil")
	case config == nil:
		return nil, errors.New("inboxnats: New: config is nil: Stream, Durable, Consumer and Key are required")
	}
	cfg := config.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Consumer[TTx]{
		js:      js,
		client:  client,
		handler: handler,
		config:  cfg,
		logger:  logger,
		leases:  newLeases(),
		breaker: inboxtransport.NewBreaker(cfg.Consumer, client.Config(), logger),
	}, nil
}

// Breaker returns the consumer's Breaker, whose State shows a store
// outage or an open streak breaker.
func (c *Consumer[TTx]) Breaker() *inboxtransport.Breaker { return c.breaker }

// Config returns the consumer's configuration with defaults applied, except
// those that Run takes from the JetStream consumer's configuration
// (MaxDeliver and Heartbeat are left as given).
func (c *Consumer[TTx]) Config() Config { return c.config }

// Run consumes until ctx is done, then shuts down gracefully:
//
//  1. it stops fetching;
//  2. messages fetched but not started are released at once (Nak);
//  3. messages being processed get Config.ShutdownTimeout to finish and be
//     acknowledged; after that their contexts are cancelled, they roll back
//     and are released;
//  4. it returns nil once every goroutine it started has ended.
//
// Before consuming, Run looks the JetStream consumer up and checks its
// configuration; it returns an error if the stream or the consumer does not
// exist or does not suit (see Config). It returns ErrClosed when the NATS
// connection is closed under it. Other errors of NATS and of the store are
// logged and retried, never returned. Run returns an error at once if the
// consumer is already running.
func (c *Consumer[TTx]) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return errors.New("inboxnats: Run: the consumer is already running")
	}
	defer c.running.Store(false)

	cons, err := c.lookup(ctx)
	if err != nil || cons == nil {
		return err
	}
	cfg, err := c.config.resolve(cons.CachedInfo().Config)
	if err != nil {
		return err
	}
	c.maxDeliver, c.beat = cfg.MaxDeliver, cfg.Heartbeat
	c.serverMaxDeliver = max(cons.CachedInfo().Config.MaxDeliver, 0)
	if c.policy, err = c.newPolicy(); err != nil {
		return err
	}
	if mp := cons.CachedInfo().Config.MaxAckPending; mp > 0 && mp < cfg.Workers*cfg.Batch {
		c.logger.WarnContext(ctx, "inboxnats: the JetStream consumer's MaxAckPending is below Workers × Batch: fetches will come back short",
			"stream", cfg.Stream, "durable", cfg.Durable, "max_ack_pending", mp, "workers", cfg.Workers, "batch", cfg.Batch)
	}

	// fetchCtx ends when ctx does or the connection was closed.
	fetchCtx, stopFetching := context.WithCancel(ctx)
	defer stopFetching()
	var closed atomic.Bool
	// Work in progress gets ShutdownTimeout to finish.
	workCtx, finish := inboxtransport.WorkContext(fetchCtx, c.config.ShutdownTimeout)
	defer finish()
	hbCtx, stopHeartbeat := context.WithCancel(workCtx)
	var hb sync.WaitGroup
	hb.Go(func() { c.heartbeat(hbCtx) })

	var wg sync.WaitGroup
	for range c.config.Workers {
		wg.Go(func() {
			if c.work(fetchCtx, workCtx, cons) {
				closed.Store(true)
				stopFetching()
			}
		})
	}
	wg.Wait()
	stopHeartbeat()
	hb.Wait()
	if closed.Load() {
		return ErrClosed
	}
	return nil
}

// lookup finds the JetStream consumer, retrying errors that may pass. It
// returns nil, nil when ctx is done first.
func (c *Consumer[TTx]) lookup(ctx context.Context) (jetstream.Consumer, error) {
	backoff := fetchErrorBackoff
	for {
		cons, err := c.js.Consumer(ctx, c.config.Stream, c.config.Durable)
		switch {
		case err == nil:
			return cons, nil
		case ctx.Err() != nil:
			return nil, nil
		case errors.Is(err, jetstream.ErrStreamNotFound), errors.Is(err, jetstream.ErrConsumerNotFound):
			return nil, fmt.Errorf("inboxnats: JetStream consumer %s/%s: %w", c.config.Stream, c.config.Durable, err)
		case c.js.Conn().IsClosed():
			return nil, ErrClosed
		}
		c.logger.WarnContext(ctx, "inboxnats: could not look the JetStream consumer up; trying again",
			"stream", c.config.Stream, "durable", c.config.Durable, "backoff", backoff, "err", err)
		inboxtransport.Sleep(ctx, backoff)
		backoff = min(backoff*2, maxFetchErrorBackoff)
	}
}

// work fetches and processes batches until ctx is done. It reports whether
// it stopped because the connection was closed.
func (c *Consumer[TTx]) work(ctx, workCtx context.Context, cons jetstream.Consumer) (closed bool) {
	backoff := fetchErrorBackoff
	for {
		c.policy.Wait(ctx)
		if ctx.Err() != nil {
			return false
		}
		ds, err := c.fetch(ctx, cons)
		if len(ds) > 0 {
			c.leases.Add(ds...)
			if ctx.Err() != nil {
				// Fetched as the consumer stopped: let them go.
				c.release(workCtx, ds)
				return false
			}
			c.process(workCtx, ds)
		}
		switch {
		case err == nil:
			backoff = fetchErrorBackoff
		case ctx.Err() != nil:
			return false
		case c.js.Conn().IsClosed():
			return true
		default:
			c.logger.WarnContext(ctx, "inboxnats: fetch failed", "stream", c.config.Stream, "durable", c.config.Durable,
				"backoff", backoff, "err", err)
			inboxtransport.Sleep(ctx, backoff)
			backoff = min(backoff*2, maxFetchErrorBackoff)
		}
	}
}

// fetch asks for up to Batch messages and waits up to FetchWait for them.
// It returns the messages it got even when the fetch then failed.
func (c *Consumer[TTx]) fetch(ctx context.Context, cons jetstream.Consumer) ([]*delivery, error) {
	fctx, cancel := context.WithTimeout(ctx, c.config.FetchWait)
	defer cancel()
	b, err := cons.Fetch(c.config.Batch, jetstream.FetchContext(fctx))
	if err != nil {
		return nil, err
	}
	var ds []*delivery
	for m := range b.Messages() {
		ds = append(ds, newDelivery(c.config.Stream, m))
	}
	err = b.Error()
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		// The fetch waited its FetchWait out: not a failure.
		err = nil
	}
	return ds, err
}
