package inboxsqs

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxtransport"
	"github.com/txinbox/inbox/internal/transportkit"
)

// sqsAPI is the part of *sqs.Client a Consumer calls.
type sqsAPI interface {
	ReceiveMessage(context.Context, *sqs.ReceiveMessageInput, ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessageBatch(context.Context, *sqs.DeleteMessageBatchInput, ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error)
	ChangeMessageVisibility(context.Context, *sqs.ChangeMessageVisibilityInput, ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error)
	SendMessage(context.Context, *sqs.SendMessageInput, ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
}

var _ sqsAPI = (*sqs.Client)(nil)

// settleTimeout bounds each delete and visibility change that settles a
// message. They run even after Run's context is done, so that work that
// committed is acknowledged during a shutdown.
const settleTimeout = 10 * time.Second

// Receive errors pause the poller, doubling from the first to the last.
const (
	receiveErrorBackoff    = time.Second
	maxReceiveErrorBackoff = 30 * time.Second
)

// Consumer receives messages from an SQS queue and applies each exactly
// once through an inbox client: it deletes a message only after the
// transaction that recorded it committed, or after it was dead-lettered.
// Create one with New and start it with Run.
type Consumer[TTx any] struct {
	api    sqsAPI
	config Config
	fifo   bool
	logger *slog.Logger
	// loop is the delivery loop every transport runs; src is this
	// consumer's SQS side of it.
	loop *inboxtransport.Loop[TTx, *delivery]
	src  *source
}

// New returns a consumer of config.QueueURL over sqsClient, the caller's
// configured SQS client, that applies each message with handler through
// client. config is required: QueueURL, Consumer and Key have no default.
func New[TTx any](sqsClient *sqs.Client, client *inbox.Client[TTx], handler inbox.Handler[TTx], config *Config) (*Consumer[TTx], error) {
	if sqsClient == nil {
		return nil, errors.New("inboxsqs: New: SQS client is nil")
	}
	return newConsumer(sqsClient, client, handler, config)
}

func newConsumer[TTx any](api sqsAPI, client *inbox.Client[TTx], handler inbox.Handler[TTx], config *Config) (*Consumer[TTx], error) {
	cfg, err := transportkit.Complete("inboxsqs", config, "QueueURL, Consumer and Key", (*Config).withDefaults, (*Config).validate)
	if err != nil {
		return nil, err
	}
	c := &Consumer[TTx]{api: api, config: cfg, fifo: isFIFO(cfg.QueueURL)}
	c.src = &source{api: api, config: &c.config}
	c.loop, err = inboxtransport.NewLoop(inboxtransport.LoopConfig[TTx, *delivery]{
		Name: "inboxsqs", Client: client, Handler: handler,
		Consumer: cfg.Consumer, Key: cfg.Key, Settings: cfg.Settings,
		Ordered:        c.fifo,
		ReceiveBackoff: receiveErrorBackoff, MaxReceiveBackoff: maxReceiveErrorBackoff,
		DeadLetter: c.src.deadLetter,
	})
	if err != nil {
		return nil, err
	}
	c.logger = c.loop.Logger()
	c.src.logger = c.logger
	return c, nil
}

// Breaker returns the consumer's Breaker, whose State shows a store
// outage or an open streak breaker.
func (c *Consumer[TTx]) Breaker() *inboxtransport.Breaker { return c.loop.Breaker() }

// Config returns the consumer's configuration with defaults applied.
func (c *Consumer[TTx]) Config() Config { return c.config }

// Run consumes the queue until ctx is done, then shuts down gracefully:
//
//  1. it stops receiving;
//  2. messages received but not started are made visible again at once;
//  3. messages being processed get Config.ShutdownTimeout to finish and be
//     deleted; after that their contexts are cancelled, they roll back and
//     are made visible again;
//  4. it returns nil once every goroutine it started has ended.
//
// Errors of SQS and of the store are logged and retried, never returned. A
// Consumer runs once: a second Run returns inboxtransport.ErrRunTwice.
func (c *Consumer[TTx]) Run(ctx context.Context) error {
	if !c.fifo {
		return c.loop.Run(ctx, c.src)
	}
	return c.loop.RunFunc(ctx, c.src, func(ctx, work context.Context, _ func(error)) {
		c.runFIFO(ctx, work)
	})
}

// runFIFO runs one poller that feeds a sequencer, and Workers workers that
// take runs of one group at a time from it.
func (c *Consumer[TTx]) runFIFO(ctx, work context.Context) {
	seq := newSequencer(c.config.MaxBatch, time.Now)
	limit := c.config.Workers * c.config.MaxBatch
	var wg sync.WaitGroup
	wg.Go(func() {
		_ = c.loop.Poll(ctx, c.src, func() int { return min(seq.room(ctx, limit), c.config.MaxBatch) }, func(ds []*delivery) {
			for _, d := range ds {
				if wait := seq.push(d); wait > 0 {
					c.loop.RetryAfter(work, c.src, d, wait)
				}
			}
		})
	})
	for range c.config.Workers {
		wg.Go(func() {
			for {
				key, run, ok := seq.next(ctx)
				if !ok {
					return
				}
				h := c.loop.Handle(work, c.src, run)
				var retryAt time.Time
				if h.Retried {
					retryAt = time.Now().Add(ceilSeconds(h.Wait))
				}
				for _, d := range seq.finish(key, len(run)-len(h.Again), h.Again, retryAt) {
					c.loop.RetryAfter(work, c.src, d, time.Until(retryAt))
				}
			}
		})
	}
	wg.Wait()
	if rest := seq.drain(); len(rest) > 0 {
		c.loop.Release(work, c.src, rest...)
	}
}
