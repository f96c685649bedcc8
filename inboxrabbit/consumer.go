package inboxrabbit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxtransport"
	"github.com/txinbox/inbox/internal/transportkit"
)

// errChannelLost is what a receive returns when the channel it waited on
// died: the consumer dials again after Config.ReconnectBackoff.
var errChannelLost = errors.New("inboxrabbit: lost the channel; dialling again")

// Consumer consumes a RabbitMQ queue and applies each message exactly once
// through an inbox client: it acknowledges a delivery only after the
// transaction that recorded it committed, and only on the channel it
// arrived on. Create one with New and start it with Run.
type Consumer[TTx any] struct {
	dial   DialFunc
	config Config
	logger *slog.Logger
	gen    atomic.Uint64
	// loop is the delivery loop every transport runs; it counts each
	// event's failed attempts (classic queues count no deliveries) and
	// the deliveries that were not attempts (a quorum queue's
	// x-delivery-count includes them).
	loop *inboxtransport.Loop[TTx, *delivery]

	// mu guards sess, the session the workers receive from.
	mu   sync.Mutex
	sess *session
}

// New returns a consumer of config.Queue that applies each message with
// handler through client. dial opens its connections, with the caller's
// URL, credentials and TLS (DialURL for the common case); it is called
// again, with a backoff, whenever the connection or the channel is lost.
// config is required: Queue, Consumer and Key have no default.
func New[TTx any](dial DialFunc, client *inbox.Client[TTx], handler inbox.Handler[TTx], config *Config) (*Consumer[TTx], error) {
	if dial == nil {
		return nil, errors.New("inboxrabbit: New: dial is nil")
	}
	cfg, err := transportkit.Complete("inboxrabbit", config, "Queue, Consumer and Key", (*Config).withDefaults, (*Config).validate)
	if err != nil {
		return nil, err
	}
	c := &Consumer[TTx]{dial: dial, config: cfg}
	c.loop, err = inboxtransport.NewLoop(inboxtransport.LoopConfig[TTx, *delivery]{
		Name: "inboxrabbit", Client: client, Handler: handler,
		Consumer: cfg.Consumer, Key: cfg.Key, Settings: cfg.Settings,
		// A requeued delivery goes to the back of a quorum queue: in
		// order, a retry waits in place.
		Ordered: cfg.Ordered, RetryInPlace: cfg.Ordered,
		ReceiveBackoff: cfg.ReconnectBackoff, MaxReceiveBackoff: cfg.MaxReconnectBackoff,
		DeadLetter: deadLetter,
	})
	if err != nil {
		return nil, err
	}
	c.logger = c.loop.Logger()
	// The broker pushes deliveries into the channel's prefetch while a
	// batch commits: that is the overlap. Taking the next batch ahead
	// would only take fewer deliveries at a time.
	c.loop.ReceiveAhead(false)
	return c, nil
}

// Breaker returns the consumer's Breaker, whose State shows a store
// outage or an open streak breaker.
func (c *Consumer[TTx]) Breaker() *inboxtransport.Breaker { return c.loop.Breaker() }

// Config returns the consumer's configuration with defaults applied.
func (c *Consumer[TTx]) Config() Config { return c.config }

// Run consumes the queue until ctx is done, then shuts down gracefully:
//
//  1. it stops taking deliveries; those taken and not started are
//     requeued;
//  2. deliveries being processed get Config.ShutdownTimeout to finish and
//     be acknowledged; after that their contexts are cancelled and they
//     roll back;
//  3. it closes its channel and connection, which requeues every delivery
//     not acknowledged (those prefetched, held for a retry, or cancelled);
//  4. it returns nil once every goroutine it started has ended.
//
// A lost connection or channel, and a failed dial, are logged and followed
// by a new dial after a backoff; errors of the store are logged and
// retried. It never returns inboxtransport.ErrClosed: it dials its own
// connections. A Consumer runs once: a second Run returns
// inboxtransport.ErrRunTwice.
func (c *Consumer[TTx]) Run(ctx context.Context) error {
	return c.loop.Run(ctx, (*source[TTx])(c))
}

// source is the consumer's RabbitMQ side of the delivery loop.
type source[TTx any] Consumer[TTx]

// session returns the live session, dialling a new one when there is
// none or the last one died.
func (s *source[TTx]) session(ctx context.Context) (*session, error) {
	c := (*Consumer[TTx])(s)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sess != nil && !c.sess.dead.Load() {
		return c.sess, nil
	}
	if c.sess != nil {
		c.sess.close()
		c.sess = nil
	}
	sess, err := c.connect(ctx)
	if err != nil {
		return nil, err
	}
	c.sess = sess
	return sess, nil
}

// Receive waits for a delivery and returns it with those already waiting
// behind it, up to n, and with Config.BatchWait with those that arrive
// within BatchWait of it. It returns errChannelLost when the channel died.
func (s *source[TTx]) Receive(ctx context.Context, n int) ([]*delivery, error) {
	sess, err := s.session(ctx)
	if err != nil {
		return nil, err
	}
	var first *delivery
	select {
	case <-ctx.Done():
		return nil, nil
	case <-sess.done:
		return nil, errChannelLost
	case d, ok := <-sess.ready:
		if !ok {
			return nil, errChannelLost
		}
		first = newDelivery(s.config.Queue, sess, d)
	}
	ds := []*delivery{first}
	sess.hand(first)
	transportkit.Fill(ctx, sess.ready, n-1, s.config.BatchWait, sess.done, func(d amqp.Delivery) {
		dl := newDelivery(s.config.Queue, sess, d)
		sess.hand(dl)
		ds = append(ds, dl)
	})
	return ds, nil
}

// Ack acknowledges ds, whose transactions committed: with one multiple
// ack when ds are every delivery handed out on their channel up to the
// last of them (session.ackAll), which saves the broker and the client a
// frame per delivery; else one by one.
func (s *source[TTx]) Ack(ctx context.Context, ds []*delivery) {
	if sess := ds[0].sess; !sess.dead.Load() && sameSession(ds) {
		if ok, err := sess.ackAll(ds); ok {
			if err != nil {
				s.logger.WarnContext(ctx, "inboxrabbit: ack failed; the broker requeues the deliveries when their channel closes",
					"queue", s.config.Queue, "deliveries", len(ds), "err", err)
			}
			return
		}
	}
	for _, d := range ds {
		s.settle(ctx, d, "ack", func() error { return d.raw.Ack(false) })
	}
}

// sameSession reports whether ds all arrived on one channel.
func sameSession(ds []*delivery) bool {
	for _, d := range ds[1:] {
		if d.sess != ds[0].sess {
			return false
		}
	}
	return true
}

// Reject nacks d without requeue: a dead-letter exchange on the queue
// gets it too.
func (s *source[TTx]) Reject(ctx context.Context, d *delivery, _ string) {
	s.settle(ctx, d, "nack", func() error { return d.raw.Nack(false, false) })
}

// Retry holds d for delay, then requeues it, unless its channel closed
// first (which requeues it).
func (s *source[TTx]) Retry(ctx context.Context, d *delivery, delay time.Duration) {
	ctx = context.WithoutCancel(ctx)
	d.sess.later(delay, func() {
		s.settle(ctx, d, "requeue", func() error { return d.raw.Nack(false, true) })
	})
}

// Release requeues ds.
func (s *source[TTx]) Release(ctx context.Context, ds []*delivery) {
	for _, d := range ds {
		s.settle(ctx, d, "requeue", func() error { return d.raw.Nack(false, true) })
	}
}

// Stop closes the session, which requeues every delivery not
// acknowledged.
func (s *source[TTx]) Stop() {
	c := (*Consumer[TTx])(s)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sess != nil {
		c.sess.close()
		c.sess = nil
	}
}

// settle acknowledges d with ack on its own channel, unless that channel
// died: the broker then requeued d, and its redelivery is skipped by the
// inbox (or processed again, if it did not commit). An ack on another
// channel would name another delivery, or close that channel.
func (s *source[TTx]) settle(ctx context.Context, d *delivery, what string, ack func() error) {
	defer d.sess.settled(d)
	if d.sess.dead.Load() {
		s.logger.InfoContext(ctx, "inboxrabbit: skipped an "+what+": the delivery's channel is gone and the broker requeued it",
			"queue", s.config.Queue, "id", d.tr.Message.ID, "generation", d.sess.gen)
		return
	}
	if err := ack(); err != nil {
		s.logger.WarnContext(ctx, "inboxrabbit: "+what+" failed; the broker requeues the delivery when its channel closes",
			"queue", s.config.Queue, "id", d.tr.Message.ID, "err", err)
	}
}

// deadLetter names a dead letter whose message has no message-id property
// by its body, so that two messages without ids do not share one, and
// stores it.
func deadLetter(_ context.Context, _ *delivery, p *inbox.DeadLetterParams, store func(*inbox.DeadLetterParams) error) error {
	if p.Message.Source.BrokerID == "" {
		sum := sha256.Sum256(p.Message.Payload)
		p.Message.Source.BrokerID = "body-sha256:" + hex.EncodeToString(sum[:])
	}
	return store(p)
}
