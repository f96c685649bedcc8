package inboxrabbit

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/txinbox/inbox"
)

// Defaults of the Config fields.
const (
	DefaultWorkers             = 2
	DefaultBatch               = 50
	DefaultMaxDeliveries       = 5
	DefaultRetryBackoff        = time.Second
	DefaultMaxRetryBackoff     = time.Minute
	DefaultReconnectBackoff    = 100 * time.Millisecond
	DefaultMaxReconnectBackoff = 30 * time.Second
	DefaultShutdownTimeout     = 30 * time.Second
)

// MaxRetryBackoffLimit is the longest Config.MaxRetryBackoff: a message
// waiting for its retry is held unacknowledged, and RabbitMQ closes the
// channel of a delivery held longer than its consumer_timeout (30 minutes
// by default).
const MaxRetryBackoffLimit = 10 * time.Minute

// Config configures a Consumer. Queue, Consumer and Key are required; every
// other field has a default.
type Config struct {
	// Queue is the queue to consume. The application declares it, with
	// its dead-letter exchange, if any. Required.
	Queue string

	// Consumer is the inbox consumer name: the skip set this consumer's
	// messages are recorded in. Keep it stable. Required.
	Consumer string

	// Key reads the producer's event id from a delivery: inbox.HeaderKey
	// with HeaderEventID for a header, MessageIDKey for the message-id
	// property, inbox.JSONKey for a field of the body. Required: nothing in
	// this package ever mints an id.
	Key inbox.KeyFunc

	// ConsumerTag names this consumer on the channel, with a suffix per
	// connection. Defaults to "" (a tag made from the Consumer name).
	ConsumerTag string

	// Workers is how many batches are processed at once, from the
	// deliveries of one channel. Defaults to DefaultWorkers (2), or 1 when
	// Ordered.
	Workers int

	// Batch is the most deliveries one batch takes: a worker takes the
	// first delivery that arrives, and those already waiting behind it, up
	// to Batch, and processes them as one batch (one claim statement and
	// one transaction when no handler fails). Defaults to DefaultBatch
	// (50), or 1 when Ordered.
	Batch int

	// Prefetch is the channel's Qos prefetch count: how many deliveries
	// the broker sends before it waits for acks. It must be at least Batch.
	// Deliveries waiting for a retry hold their place in it. Defaults to
	// 2 × Workers × Batch, or 1 when Ordered.
	Prefetch int

	// Ordered processes the queue strictly in order: one worker, one
	// delivery at a time, Prefetch 1, so that the broker sends nothing
	// else while a delivery is held; a delivery that fails with a
	// retryable error is held and tried again in place after its backoff,
	// not requeued (a quorum queue requeues to the back). Order holds for
	// a queue with one consumer at a time (x-single-active-consumer, or
	// one process), as long as its channel lives: a delivery the broker
	// takes back from a lost channel goes where the queue type puts
	// returns. Workers and Batch must be 0 or 1, and Prefetch 0 or 1.
	// Defaults to false.
	Ordered bool

	// MaxDeliveries bounds redelivery. A delivery whose handler fails with
	// a retryable error of its own on its MaxDeliveries-th attempt is
	// dead-lettered instead of retried. The attempt is the quorum queue's
	// x-delivery-count plus one where the broker sets it, less this
	// process's deliveries of the event that were not attempts, or else
	// one more than this process's own count of the event's failed
	// attempts. Failures that say nothing about the message (inbox.Judge:
	// the store's, whatever its code, one the handler marked
	// inbox.Unavailable, a lock timeout behind a concurrent delivery,
	// shutdown, the streak breaker open) are not attempts and never
	// dead-letter. Set a quorum queue's own x-delivery-limit, if any, well
	// above this, so that the broker does not drop a message the inbox has
	// not recorded, the deliveries that were not attempts included
	// (RabbitMQ 4 sets 20 by default). Defaults to DefaultMaxDeliveries (5).
	MaxDeliveries int

	// RetryBackoff is how long a delivery whose handler failed with a
	// retryable error is held before it is requeued (Nack with requeue),
	// or tried again in place when Ordered, so that a failing message does
	// not spin. It doubles with each
	// delivery, up to MaxRetryBackoff. It is also how long consuming pauses
	// after the store was unavailable, doubling while it stays so. Defaults
	// to DefaultRetryBackoff (1s).
	RetryBackoff time.Duration

	// MaxRetryBackoff caps RetryBackoff's doubling, at most
	// MaxRetryBackoffLimit (10m). Keep it, with the longest transaction,
	// well under the broker's consumer_timeout. Defaults to
	// DefaultMaxRetryBackoff (1m).
	MaxRetryBackoff time.Duration

	// ReconnectBackoff is the pause before dialling again after the
	// connection or the channel was lost, or a dial failed. It doubles
	// while dials fail, up to MaxReconnectBackoff. Defaults to
	// DefaultReconnectBackoff (100ms).
	ReconnectBackoff time.Duration

	// MaxReconnectBackoff caps ReconnectBackoff's doubling. Defaults to
	// DefaultMaxReconnectBackoff (30s).
	MaxReconnectBackoff time.Duration

	// ShutdownTimeout is how long, after Run's context is done, the
	// deliveries already being processed get to finish, commit and be
	// acknowledged. Then their contexts are cancelled and the channel is
	// closed, which requeues them. Negative cancels them at once. Defaults
	// to DefaultShutdownTimeout (30s).
	ShutdownTimeout time.Duration

	// Logger receives the consumer's logs: reconnects, skipped and failed
	// acks, retries, dead letters. Defaults to nil, which is silent.
	Logger *slog.Logger
}

func (c *Config) withDefaults() Config {
	var out Config
	if c != nil {
		out = *c
	}
	if out.Workers == 0 {
		out.Workers = DefaultWorkers
		if out.Ordered {
			out.Workers = 1
		}
	}
	if out.Batch == 0 {
		out.Batch = DefaultBatch
		if out.Ordered {
			out.Batch = 1
		}
	}
	if out.Prefetch == 0 {
		out.Prefetch = 2 * out.Workers * out.Batch
		if out.Ordered {
			out.Prefetch = 1
		}
	}
	if out.MaxDeliveries == 0 {
		out.MaxDeliveries = DefaultMaxDeliveries
	}
	if out.RetryBackoff == 0 {
		out.RetryBackoff = DefaultRetryBackoff
	}
	if out.MaxRetryBackoff == 0 {
		out.MaxRetryBackoff = min(max(DefaultMaxRetryBackoff, out.RetryBackoff), MaxRetryBackoffLimit)
	}
	if out.ReconnectBackoff == 0 {
		out.ReconnectBackoff = DefaultReconnectBackoff
	}
	if out.MaxReconnectBackoff == 0 {
		out.MaxReconnectBackoff = max(DefaultMaxReconnectBackoff, out.ReconnectBackoff)
	}
	if out.ShutdownTimeout == 0 {
		out.ShutdownTimeout = DefaultShutdownTimeout
	}
	if out.ShutdownTimeout < 0 {
		out.ShutdownTimeout = 0
	}
	return out
}

func (c *Config) validate() error {
	switch {
	case c.Queue == "":
		return errors.New("inboxrabbit: Config.Queue is required")
	case c.Key == nil:
		return errors.New("inboxrabbit: Config.Key is required: read the producer's event id with inbox.HeaderKey(inboxrabbit.HeaderEventID), inboxrabbit.MessageIDKey or inbox.JSONKey")
	case c.Workers < 0:
		return fmt.Errorf("inboxrabbit: Config.Workers must be positive, got %d", c.Workers)
	case c.Batch < 0:
		return fmt.Errorf("inboxrabbit: Config.Batch must be positive, got %d", c.Batch)
	case c.Prefetch < c.Batch || c.Prefetch > 65535:
		return fmt.Errorf("inboxrabbit: Config.Prefetch must be between Config.Batch (%d) and 65535, got %d", c.Batch, c.Prefetch)
	case c.Ordered && c.Workers != 1:
		return fmt.Errorf("inboxrabbit: Config.Workers must be 1 with Config.Ordered, got %d", c.Workers)
	case c.Ordered && c.Batch != 1:
		return fmt.Errorf("inboxrabbit: Config.Batch must be 1 with Config.Ordered, got %d", c.Batch)
	case c.Ordered && c.Prefetch != 1:
		return fmt.Errorf("inboxrabbit: Config.Prefetch must be 1 with Config.Ordered, got %d", c.Prefetch)
	case c.MaxDeliveries < 0:
		return fmt.Errorf("inboxrabbit: Config.MaxDeliveries must be positive, got %d", c.MaxDeliveries)
	case c.RetryBackoff < 0:
		return fmt.Errorf("inboxrabbit: Config.RetryBackoff must not be negative, got %v", c.RetryBackoff)
	case c.MaxRetryBackoff < c.RetryBackoff || c.MaxRetryBackoff > MaxRetryBackoffLimit:
		return fmt.Errorf("inboxrabbit: Config.MaxRetryBackoff must be between Config.RetryBackoff (%v) and %v, got %v", c.RetryBackoff, MaxRetryBackoffLimit, c.MaxRetryBackoff)
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
