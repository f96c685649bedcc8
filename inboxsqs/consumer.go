package inboxsqs

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxtransport"
)

// sqsAPI is the part of *sqs.Client a Consumer calls.
type sqsAPI interface {
	ReceiveMessage(context.Context, *sqs.ReceiveMessageInput, ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessageBatch(context.Context, *sqs.DeleteMessageBatchInput, ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error)
	ChangeMessageVisibility(context.Context, *sqs.ChangeMessageVisibilityInput, ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error)
	SendMessage(context.Context, *sqs.SendMessageInput, ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
}

var _ sqsAPI = (*sqs.Client)(nil)

// settleTimeout bounds each delete, visibility change and dead-letter write
// that settles a message. They run even after Run's context is done, so
// that work that committed is acknowledged during a shutdown.
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
	api     sqsAPI
	client  *inbox.Client[TTx]
	handler inbox.Handler[TTx]
	config  Config
	fifo    bool
	logger  *slog.Logger
	leases  *leases

	running atomic.Bool

	// policy keys, processes, judges and dead-letters what is received,
	// and counts each message's receives that were not attempts, which
	// its ApproximateReceiveCount includes.
	policy *inboxtransport.Policy[TTx, *delivery]
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
	switch {
	case client == nil:
		return nil, errors.New("inboxsqs: New: inbox client is nil")
	case handler == nil:
		return nil, errors.New("inboxsqs: New: handler is nil")
	case config == nil:
		return nil, errors.New("inboxsqs: New: config is nil: QueueURL, Consumer and Key are required")
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
		api:     api,
		client:  client,
		handler: handler,
		config:  cfg,
		fifo:    isFIFO(cfg.QueueURL),
		logger:  logger,
		leases:  newLeases(),
	}
	policy, err := inboxtransport.NewPolicy(inboxtransport.Config[TTx, *delivery]{
		Client:          client,
		Handler:         handler,
		Consumer:        cfg.Consumer,
		Key:             cfg.Key,
		MaxAttempts:     cfg.MaxReceives,
		RetryBackoff:    cfg.RetryBackoff,
		MaxRetryBackoff: cfg.MaxRetryBackoff,
		Name:            "inboxsqs",
		Logger:          logger,
		DeadLetter:      c.deadLetter,
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
//  1. it stops receiving;
//  2. messages received but not started are made visible again at once;
//  3. messages being processed get Config.ShutdownTimeout to finish and be
//     deleted; after that their contexts are cancelled, they roll back and
//     are made visible again;
//  4. it returns nil once every goroutine it started has ended.
//
// Errors of SQS and of the store are logged and retried, never returned.
// Run returns an error at once if the consumer is already running.
func (c *Consumer[TTx]) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return errors.New("inboxsqs: Run: the consumer is already running")
	}
	defer c.running.Store(false)

	// Work in progress gets ShutdownTimeout to finish.
	workCtx, finish := inboxtransport.WorkContext(ctx, c.config.ShutdownTimeout)
	defer finish()
	hbCtx, stopHeartbeat := context.WithCancel(workCtx)
	var hb sync.WaitGroup
	hb.Go(func() { c.heartbeat(hbCtx) })

	if c.fifo {
		c.runFIFO(ctx, workCtx)
	} else {
		c.runStandard(ctx, workCtx)
	}
	stopHeartbeat()
	hb.Wait()
	return nil
}

// runStandard runs Workers pollers, each of which processes what it
// receives as one batch.
func (c *Consumer[TTx]) runStandard(ctx, workCtx context.Context) {
	var wg sync.WaitGroup
	for range c.config.Workers {
		wg.Go(func() {
			c.poll(ctx, func() int { return c.config.MaxMessages }, func(ds []*delivery) {
				c.processRun(workCtx, ds, false)
			})
		})
	}
	wg.Wait()
}

// runFIFO runs one poller that feeds a sequencer, and Workers workers that
// take runs of one group at a time from it.
func (c *Consumer[TTx]) runFIFO(ctx, workCtx context.Context) {
	seq := newSequencer(c.config.MaxMessages, time.Now)
	limit := c.config.Workers * c.config.MaxMessages
	var wg sync.WaitGroup
	wg.Go(func() {
		c.poll(ctx, func() int { return min(seq.room(ctx, limit), c.config.MaxMessages) }, func(ds []*delivery) {
			for _, d := range ds {
				if wait := seq.push(d); wait > 0 {
					c.handBack(workCtx, []*delivery{d}, wait)
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
				res := c.processRun(workCtx, run, true)
				var retryAt time.Time
				if res.retry > 0 {
					retryAt = res.retryFrom.Add(res.retry)
				}
				if back := seq.finish(key, len(run)-len(res.requeue), res.requeue, retryAt); len(back) > 0 {
					c.handBack(workCtx, back, time.Until(retryAt))
				}
			}
		})
	}
	wg.Wait()
	if rest := seq.drain(); len(rest) > 0 {
		c.handBack(workCtx, rest, 0)
	}
}

// poll receives until ctx is done. want returns how many messages to ask
// for, 0 when ctx is done; got takes what was received.
func (c *Consumer[TTx]) poll(ctx context.Context, want func() int, got func([]*delivery)) {
	backoff := receiveErrorBackoff
	for {
		c.policy.Wait(ctx)
		n := want()
		if ctx.Err() != nil || n <= 0 {
			return
		}
		ds, err := c.receive(ctx, n)
		switch {
		case ctx.Err() != nil && err != nil:
			// A receive cut short may have been served: its messages
			// come back when their visibility timeout expires.
			return
		case err != nil:
			c.logger.WarnContext(ctx, "inboxsqs: receive failed", "queue", c.config.QueueURL, "backoff", backoff, "err", err)
			inboxtransport.Sleep(ctx, backoff)
			backoff = min(backoff*2, maxReceiveErrorBackoff)
			continue
		}
		backoff = receiveErrorBackoff
		if len(ds) > 0 {
			c.leases.Add(ds...)
			got(ds)
		}
	}
}

// receive long-polls for up to n messages.
func (c *Consumer[TTx]) receive(ctx context.Context, n int) ([]*delivery, error) {
	start := time.Now()
	out, err := c.api.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl:              aws.String(c.config.QueueURL),
		MaxNumberOfMessages:   int32(n),
		WaitTimeSeconds:       seconds(c.config.WaitTime),
		VisibilityTimeout:     seconds(c.config.VisibilityTimeout),
		MessageAttributeNames: []string{"All"},
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{
			types.MessageSystemAttributeNameApproximateReceiveCount,
			types.MessageSystemAttributeNameMessageGroupId,
		},
	})
	if err != nil {
		return nil, err
	}
	ds := make([]*delivery, 0, len(out.Messages))
	for _, m := range out.Messages {
		// The visibility timeout started after start: extending from
		// start is early, never late.
		ds = append(ds, newDelivery(c.config.QueueURL, m, start))
	}
	return ds, nil
}
