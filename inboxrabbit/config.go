package inboxrabbit

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxtransport"
)

// Defaults of the Config fields. The shared knobs' defaults are
// inboxtransport's (see inboxtransport.Settings).
const (
	DefaultWorkers             = inboxtransport.DefaultWorkers
	DefaultMaxBatch            = inboxtransport.DefaultMaxBatch
	DefaultMaxDeliveries       = inboxtransport.DefaultMaxDeliveries
	DefaultRetryBackoff        = inboxtransport.DefaultRetryBackoff
	DefaultMaxRetryBackoff     = inboxtransport.DefaultMaxRetryBackoff
	DefaultReconnectBackoff    = 100 * time.Millisecond
	DefaultMaxReconnectBackoff = 30 * time.Second
	DefaultShutdownTimeout     = inboxtransport.DefaultShutdownTimeout
)

// MaxRetryBackoffLimit is the longest Config.MaxRetryBackoff: a message
// waiting for its retry is held unacknowledged, and RabbitMQ closes the
// channel of a delivery held longer than its consumer_timeout (30 minutes
// by default).
const MaxRetryBackoffLimit = 10 * time.Minute

// Config configures a Consumer. Queue, Consumer and Key are required; every
// other field has a default. The knobs that every transport shares
// (Workers, MaxBatch, MaxDeliveries, MaxCrashes, RetryBackoff, MaxRetryBackoff,
// ShutdownTimeout, ReplayInterval, OnResult, Logger) are those of the
// embedded inboxtransport.Settings; docs/TRANSPORTS.md has them in one
// table. Here:
//   - Workers share the deliveries of one channel; a worker takes the
//     first delivery that arrives, and those already waiting behind it, up
//     to MaxBatch;
//   - an attempt is the quorum queue's x-delivery-count plus one where the
//     broker sets it, less this process's deliveries of the event that were
//     not attempts, or else one more than this process's own count of the
//     event's failed attempts (a classic queue counts nothing). Set a quorum
//     queue's own x-delivery-limit, if any, well above MaxDeliveries, so
//     that the broker does not drop a message the inbox has not recorded
//     (RabbitMQ 4 sets 20 by default);
//   - a retried delivery is held unacknowledged for its backoff and then
//     requeued (Nack with requeue), or, when Ordered, tried again in place;
//     MaxRetryBackoff is at most MaxRetryBackoffLimit (10m): keep it, with
//     the longest transaction, well under the broker's consumer_timeout;
//   - after the shutdown timeout the channel is closed, which requeues what
//     was not acknowledged.
type Config struct {
	// Queue is the queue to consume. The application declares it, with
	// its dead-letter exchange, if any. Required.
	Queue string

	// Consumer is the inbox consumer name: the skip set this consumer's
	// messages are recorded in. Keep it stable. Required.
	Consumer string

	// Key reads the producer's event id from a delivery: inbox.HeaderKey
	// with outbox.HeaderEventID for a header, MessageIDKey for the message-id
	// property, inbox.JSONKey for a field of the body. Required: nothing in
	// this package ever mints an id.
	Key inbox.KeyFunc

	// ConsumerTag names this consumer on the channel, with a suffix per
	// connection. Defaults to "" (a tag made from the Consumer name).
	ConsumerTag string

	// Prefetch is the channel's Qos prefetch count: how many deliveries
	// the broker sends before it waits for acks. It must be at least
	// MaxBatch. Deliveries waiting for a retry hold their place in it.
	// Defaults to 2 × Workers × MaxBatch, or 1 when Ordered.
	Prefetch int

	// BatchWait is how long a receive that has its first delivery waits
	// for more to fill its batch (MaxBatch) when fewer are ready. Zero
	// takes what is ready and goes: the least latency, but under a steady
	// flow that the consumer keeps up with, each transaction then holds
	// only what arrived during the one before, and pays a commit for a
	// few messages. A few milliseconds fill those batches: fewer
	// transactions for the same messages, for at most BatchWait more
	// latency on a message that arrives alone. A backlog fills a batch at
	// once either way. docs/TRANSPORTS.md has figures. Must not be
	// negative. Defaults to 0.
	BatchWait time.Duration

	// Ordered processes the queue strictly in order: one worker, one
	// delivery at a time, Prefetch 1, so that the broker sends nothing
	// else while a delivery is held; a delivery that fails with a
	// retryable error is held and tried again in place after its backoff,
	// not requeued (a quorum queue requeues to the back). Order holds for
	// a queue with one consumer at a time (x-single-active-consumer, or
	// one process), as long as its channel lives: a delivery the broker
	// takes back from a lost channel goes where the queue type puts
	// returns. Workers and MaxBatch must be 0 or 1, and Prefetch 0 or 1.
	// Defaults to false.
	Ordered bool

	// ReconnectBackoff is the pause before dialling again after the
	// connection or the channel was lost, or a dial failed. It doubles
	// while dials fail, up to MaxReconnectBackoff. Defaults to
	// DefaultReconnectBackoff (100ms).
	ReconnectBackoff time.Duration

	// MaxReconnectBackoff caps ReconnectBackoff's doubling. Defaults to
	// DefaultMaxReconnectBackoff (30s).
	MaxReconnectBackoff time.Duration

	inboxtransport.Settings
}

func (c *Config) withDefaults() Config {
	out := *c
	if out.Ordered {
		out.Workers, out.MaxBatch = max(out.Workers, 1), max(out.MaxBatch, 1)
		out.Prefetch = max(out.Prefetch, 1)
	}
	out.Settings = out.Settings.WithDefaults()
	if c.MaxRetryBackoff == 0 {
		out.MaxRetryBackoff = min(out.MaxRetryBackoff, MaxRetryBackoffLimit)
	}
	out.Prefetch = cmp.Or(out.Prefetch, 2*out.Workers*out.MaxBatch)
	out.ReconnectBackoff = cmp.Or(out.ReconnectBackoff, DefaultReconnectBackoff)
	out.MaxReconnectBackoff = cmp.Or(out.MaxReconnectBackoff, max(DefaultMaxReconnectBackoff, out.ReconnectBackoff))
	return out
}

func (c *Config) validate() error {
	if err := c.Settings.Validate(); err != nil {
		return fmt.Errorf("inboxrabbit: %w", err)
	}
	switch {
	case c.Queue == "":
		return errors.New("inboxrabbit: Config.Queue is required")
	case c.Key == nil:
		return errors.New("inboxrabbit: Config.Key is required: read the producer's event id with inbox.HeaderKey(outbox.HeaderEventID), inboxrabbit.MessageIDKey or inbox.JSONKey")
	case c.Prefetch < c.MaxBatch || c.Prefetch > 65535:
		return fmt.Errorf("inboxrabbit: Config.Prefetch must be between Config.MaxBatch (%d) and 65535, got %d", c.MaxBatch, c.Prefetch)
	case c.Ordered && c.Workers != 1:
		return fmt.Errorf("inboxrabbit: Config.Workers must be 1 with Config.Ordered, got %d", c.Workers)
	case c.Ordered && c.MaxBatch != 1:
		return fmt.Errorf("inboxrabbit: Config.MaxBatch must be 1 with Config.Ordered, got %d", c.MaxBatch)
	case c.Ordered && c.Prefetch != 1:
		return fmt.Errorf("inboxrabbit: Config.Prefetch must be 1 with Config.Ordered, got %d", c.Prefetch)
	case c.MaxRetryBackoff > MaxRetryBackoffLimit:
		return fmt.Errorf("inboxrabbit: Config.MaxRetryBackoff must be at most %v, got %v", MaxRetryBackoffLimit, c.MaxRetryBackoff)
	case c.BatchWait < 0:
		return fmt.Errorf("inboxrabbit: Config.BatchWait must not be negative, got %v", c.BatchWait)
	case c.ReconnectBackoff < 0:
		return fmt.Errorf("inboxrabbit: Config.ReconnectBackoff must not be negative, got %v", c.ReconnectBackoff)
	case c.MaxReconnectBackoff < c.ReconnectBackoff:
		return fmt.Errorf("inboxrabbit: Config.MaxReconnectBackoff must be at least Config.ReconnectBackoff (%v), got %v", c.ReconnectBackoff, c.MaxReconnectBackoff)
	}
	if err := inbox.ValidateConsumer(c.Consumer); err != nil {
		return fmt.Errorf("inboxrabbit: Config.Consumer: %w", err)
	}
	return nil
}
