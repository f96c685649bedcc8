package inboxnats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxtransport"
	"github.com/txinbox/inbox/internal/transportkit"
)

// ErrClosed is returned by Run when the NATS connection under it was
// closed: nothing can be fetched or acknowledged any more. It is
// inboxtransport.ErrClosed, which every transport's Run returns for a
// closed client.
var ErrClosed = inboxtransport.ErrClosed

// settleTimeout bounds each DoubleAck that settles a message. It runs even
// after Run's context is done, so that work that committed is
// acknowledged during a shutdown.
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
	js     jetstream.JetStream
	config Config
	logger *slog.Logger
	// loop is the delivery loop every transport runs; src is this
	// consumer's JetStream side of it.
	loop *inboxtransport.Loop[TTx, *delivery]
	src  *source[TTx]
}

// New returns a consumer of the JetStream pull consumer config.Durable on
// config.Stream, through js, the caller's JetStream context over its
// configured connection, that applies each message with handler through
// client. config is required: Stream, Durable, Consumer and Key have no
// default. The NATS connection's own reconnect options decide how a lost
// connection is re-established; Run keeps fetching once it is.
func New[TTx any](js jetstream.JetStream, client *inbox.Client[TTx], handler inbox.Handler[TTx], config *Config) (*Consumer[TTx], error) {
	if js == nil {
		return nil, errors.New("inboxnats: New: JetStream is nil")
	}
	cfg, err := transportkit.Complete("inboxnats", config, "Stream, Durable, Consumer and Key", (*Config).withDefaults, (*Config).validate)
	if err != nil {
		return nil, err
	}
	c := &Consumer[TTx]{js: js, config: cfg}
	c.loop, err = inboxtransport.NewLoop(inboxtransport.LoopConfig[TTx, *delivery]{
		Name: "inboxnats", Client: client, Handler: handler,
		Consumer: cfg.Consumer, Key: cfg.Key, Settings: cfg.Settings,
		Ordered:        cfg.Ordered,
		ReceiveBackoff: fetchErrorBackoff, MaxReceiveBackoff: maxFetchErrorBackoff,
	})
	if err != nil {
		return nil, err
	}
	c.logger, c.src = c.loop.Logger(), &source[TTx]{c: c}
	return c, nil
}

// Breaker returns the consumer's Breaker, whose State shows a store
// outage or an open streak breaker.
func (c *Consumer[TTx]) Breaker() *inboxtransport.Breaker { return c.loop.Breaker() }

// Config returns the consumer's configuration with defaults applied, except
// those that Run takes from the JetStream consumer's configuration
// (MaxDeliveries and HeartbeatInterval are left as given).
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
// logged and retried, never returned. A Consumer runs once: a second Run
// returns inboxtransport.ErrRunTwice.
func (c *Consumer[TTx]) Run(ctx context.Context) error {
	return c.loop.Run(ctx, c.src)
}

// source is the consumer's JetStream side of the delivery loop.
type source[TTx any] struct {
	c    *Consumer[TTx]
	cons jetstream.Consumer
	// beat is Config.HeartbeatInterval, completed from the JetStream
	// consumer's configuration by Start; serverMaxDeliver is the
	// JetStream consumer's own MaxDeliver, or 0 when it sets none.
	beat             time.Duration
	serverMaxDeliver int
}

// Start looks the JetStream consumer up and completes the configuration
// from it.
func (s *source[TTx]) Start(ctx context.Context) error {
	c := s.c
	cons, err := s.lookup(ctx)
	if err != nil || cons == nil {
		return err
	}
	info := cons.CachedInfo().Config
	cfg, err := c.config.resolve(info)
	if err != nil {
		return err
	}
	s.cons, s.beat = cons, cfg.HeartbeatInterval
	s.serverMaxDeliver = max(info.MaxDeliver, 0)
	c.loop.SetMaxDeliveries(cfg.MaxDeliveries)
	if mp := info.MaxAckPending; mp > 0 && mp < cfg.Workers*cfg.MaxBatch {
		c.logger.WarnContext(ctx, "inboxnats: the JetStream consumer's MaxAckPending is below Workers × MaxBatch: fetches will come back short",
			"stream", cfg.Stream, "durable", cfg.Durable, "max_ack_pending", mp, "workers", cfg.Workers, "max_batch", cfg.MaxBatch)
	}
	return nil
}

// lookup finds the JetStream consumer, retrying errors that may pass. It
// returns nil, nil when ctx is done first.
func (s *source[TTx]) lookup(ctx context.Context) (jetstream.Consumer, error) {
	c := s.c
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
		transportkit.Sleep(ctx, backoff)
		backoff = min(backoff*2, maxFetchErrorBackoff)
	}
}

// Receive asks for up to n messages and waits up to FetchWait for them.
// It returns the messages it got even when the fetch then failed.
func (s *source[TTx]) Receive(ctx context.Context, n int) ([]*delivery, error) {
	c := s.c
	if s.cons == nil {
		return nil, ctx.Err() // Start found ctx done
	}
	fctx, cancel := context.WithTimeout(ctx, c.config.FetchWait)
	defer cancel()
	b, err := s.cons.Fetch(n, jetstream.FetchContext(fctx))
	if err == nil {
		var ds []*delivery
		for m := range b.Messages() {
			d := newDelivery(c.config.Stream, m)
			// On the last delivery that the JetStream consumer's own
			// MaxDeliver allows, a failure of its own must dead-letter
			// the message now: the server will not deliver it again.
			d.tr.Last = s.serverMaxDeliver > 0 && d.delivered >= s.serverMaxDeliver
			ds = append(ds, d)
		}
		if err = b.Error(); errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			// The fetch waited its FetchWait out: not a failure.
			err = nil
		}
		if err == nil {
			return ds, nil
		}
		return ds, s.fetchFailed(err)
	}
	return nil, s.fetchFailed(err)
}

// fetchFailed is the error of a failed fetch: ErrClosed once the
// connection is closed for good.
func (s *source[TTx]) fetchFailed(err error) error {
	if s.c.js.Conn().IsClosed() {
		return fmt.Errorf("%w: %w", ErrClosed, err)
	}
	return fmt.Errorf("inboxnats: fetch from %s/%s: %w", s.c.config.Stream, s.c.config.Durable, err)
}

// Ack acknowledges ds, whose transactions committed. A lost ack is logged
// and left: the message comes back when its AckWait runs out, and the
// inbox skips it.
func (s *source[TTx]) Ack(ctx context.Context, ds []*delivery) {
	for _, d := range ds {
		var err error
		if s.c.config.DoubleAck {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
			err = d.raw.DoubleAck(sctx)
			cancel()
		} else {
			err = d.raw.Ack()
		}
		s.failed(ctx, d, "ack failed; the message will be delivered again and skipped", err)
	}
}

// Reject terminates d, which is in the dead-letter store, so that the
// server never delivers it again: TermWithReason where the server has it
// (2.10.4 and later), Term before, where TermWithReason is ignored and
// would leave the message to be redelivered. A failed term lets it come
// back and be dead-lettered again, which updates the stored dead letter.
func (s *source[TTx]) Reject(ctx context.Context, d *delivery, reason string) {
	var err error
	if termWithReason(s.c.js.Conn().ConnectedServerVersion()) {
		err = d.raw.TermWithReason("inbox dead letter: " + reason)
	} else {
		err = d.raw.Term()
	}
	s.failed(ctx, d, "term failed; the message will be delivered again", err)
}

// Retry asks for d to be delivered again after delay.
func (s *source[TTx]) Retry(ctx context.Context, d *delivery, delay time.Duration) {
	s.failed(ctx, d, "nak failed; the message comes back when its AckWait runs out", d.raw.NakWithDelay(delay))
}

// Release hands ds back for another consumer at once, with a plain Nak:
// nothing was wrong with them.
func (s *source[TTx]) Release(ctx context.Context, ds []*delivery) {
	for _, d := range ds {
		s.failed(ctx, d, "release failed; the message comes back when its AckWait runs out", d.raw.Nak())
	}
}

// Extend restarts d's AckWait with InProgress.
func (s *source[TTx]) Extend(_ context.Context, d *delivery) error {
	return d.raw.InProgress()
}

// ExtendInterval is Config.HeartbeatInterval, as Start completed it.
func (s *source[TTx]) ExtendInterval() time.Duration { return s.beat }

// failed logs err, if any, of what was done with d.
func (s *source[TTx]) failed(ctx context.Context, d *delivery, what string, err error) {
	if err != nil {
		s.c.logger.WarnContext(ctx, "inboxnats: "+what,
			"stream", s.c.config.Stream, "sequence", d.tr.Message.Source.Offset, "err", err)
	}
}
