package inboxsqs

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/txinbox/inbox"
)

// Defaults of the Config fields.
const (
	DefaultWorkers           = 4
	DefaultMaxMessages       = 10
	DefaultWaitTime          = 20 * time.Second
	DefaultVisibilityTimeout = 30 * time.Second
	DefaultMaxReceives       = 5
	DefaultRetryBackoff      = time.Second
	DefaultMaxRetryBackoff   = 5 * time.Minute
	DefaultShutdownTimeout   = 30 * time.Second
)

// Limits that SQS places on the Config fields.
const (
	// MaxMessagesLimit is the most messages one ReceiveMessage returns and
	// one DeleteMessageBatch deletes.
	MaxMessagesLimit = 10
	// MaxWaitTime is the longest long poll.
	MaxWaitTime = 20 * time.Second
	// MaxVisibilityTimeout is the longest visibility timeout, and the
	// longest a received message can be kept invisible in total.
	MaxVisibilityTimeout = 12 * time.Hour
)

// Config configures a Consumer. QueueURL, Consumer and Key are required;
// every other field has a default.
type Config struct {
	// QueueURL is the queue to consume. A URL that ends in ".fifo" names a
	// FIFO queue: its messages are processed in order per MessageGroupId.
	// Required.
	QueueURL string

	// Consumer is the inbox consumer name: the skip set this consumer's
	// messages are recorded in. Keep it stable. Required.
	Consumer string

	// Key reads the producer's event id from a message: inbox.JSONKey for a
	// field of the JSON body, inbox.HeaderKey for a message attribute.
	// MessageIDKey is an explicit opt-in that is wrong whenever a producer
	// can send one event twice; read its documentation first. Required:
	// nothing in this package ever mints an id.
	Key inbox.KeyFunc

	// Workers is how many messages (standard queue) or message groups (FIFO
	// queue) are processed at once. On a standard queue each worker long
	// polls for itself; on a FIFO queue one poller feeds the workers, so
	// that a group's messages stay in the order they were handed out.
	// Defaults to DefaultWorkers (4).
	Workers int

	// MaxMessages is the most messages one ReceiveMessage asks for, from 1
	// to MaxMessagesLimit (10). A standard queue's receive is processed as
	// one batch (one transaction when nothing fails). Defaults to
	// DefaultMaxMessages (10).
	MaxMessages int

	// WaitTime is the long poll of each ReceiveMessage, in whole seconds up
	// to MaxWaitTime (20s). Defaults to DefaultWaitTime (20s).
	WaitTime time.Duration

	// VisibilityTimeout is the visibility timeout asked for with each
	// ReceiveMessage, and what each heartbeat extends it to, in whole
	// seconds from 1s to MaxVisibilityTimeout (12h). The queue's own
	// attribute is not used. Defaults to DefaultVisibilityTimeout (30s).
	VisibilityTimeout time.Duration

	// HeartbeatInterval is how long a received message may be held before
	// its visibility is extended back to VisibilityTimeout with
	// ChangeMessageVisibility, for as long as it is held: while it waits
	// for its group, while its handler runs, until it is deleted or
	// released. It must be shorter than VisibilityTimeout. Defaults to a
	// third of VisibilityTimeout.
	HeartbeatInterval time.Duration

	// MaxReceives bounds redelivery. A message whose handler fails with a
	// retryable error when its ApproximateReceiveCount has reached
	// MaxReceives is dead-lettered instead of retried. Failures that say
	// nothing about the message (the store is unavailable, a lock timeout
	// behind a concurrent delivery, shutdown) never dead-letter. Set the
	// queue's own redrive policy, if any, to a maxReceiveCount well above
	// this, so that SQS does not move a message the inbox has not
	// recorded. Defaults to DefaultMaxReceives (5).
	MaxReceives int

	// RetryBackoff is the visibility timeout set on a message whose handler
	// failed with a retryable error, so that it comes back after a pause
	// rather than at once. It doubles with each receive of the message, up
	// to MaxRetryBackoff, and is rounded up to whole seconds. It is also
	// how long receiving pauses after the store was unavailable, doubling
	// while it stays so. Defaults to DefaultRetryBackoff (1s).
	RetryBackoff time.Duration

	// MaxRetryBackoff caps RetryBackoff's doubling. At most
	// MaxVisibilityTimeout (12h). Defaults to DefaultMaxRetryBackoff (5m).
	MaxRetryBackoff time.Duration

	// DeadLetterQueueURL, when set, is a queue that also receives a copy
	// of each dead-lettered message (same body and attributes), after the
	// dead-letter store has it and before the original is deleted. A FIFO
	// dead-letter queue gets the original's group and its MessageId as the
	// deduplication id. Defaults to "" (the dead-letter store only).
	DeadLetterQueueURL string

	// ShutdownTimeout is how long, after Run's context is done, the
	// messages already being processed get to finish, commit and be
	// deleted. Then their contexts are cancelled and they are released for
	// redelivery. Negative cancels them at once. Defaults to
	// DefaultShutdownTimeout (30s).
	ShutdownTimeout time.Duration

	// Logger receives the consumer's logs: failed deletes and heartbeats,
	// retries, dead letters. Defaults to nil, which is silent.
	Logger *slog.Logger
}

func (c *Config) withDefaults() Config {
	var out Config
	if c != nil {
		out = *c
	}
	if out.Workers == 0 {
		out.Workers = DefaultWorkers
	}
	if out.MaxMessages == 0 {
		out.MaxMessages = DefaultMaxMessages
	}
	if out.WaitTime == 0 {
		out.WaitTime = DefaultWaitTime
	}
	if out.VisibilityTimeout == 0 {
		out.VisibilityTimeout = DefaultVisibilityTimeout
	}
	if out.HeartbeatInterval == 0 {
		out.HeartbeatInterval = out.VisibilityTimeout / 3
	}
	if out.MaxReceives == 0 {
		out.MaxReceives = DefaultMaxReceives
	}
	if out.RetryBackoff == 0 {
		out.RetryBackoff = DefaultRetryBackoff
	}
	if out.MaxRetryBackoff == 0 {
		out.MaxRetryBackoff = max(DefaultMaxRetryBackoff, out.RetryBackoff)
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
	case c.QueueURL == "":
		return errors.New("inboxsqs: Config.QueueURL is required")
	case c.Key == nil:
		return errors.New("inboxsqs: Config.Key is required: read the producer's event id with inbox.JSONKey or inbox.HeaderKey")
	case c.Workers < 0:
		return fmt.Errorf("inboxsqs: Config.Workers must be positive, got %d", c.Workers)
	case c.MaxMessages < 0 || c.MaxMessages > MaxMessagesLimit:
		return fmt.Errorf("inboxsqs: Config.MaxMessages must be between 1 and %d, got %d", MaxMessagesLimit, c.MaxMessages)
	case c.WaitTime < 0 || c.WaitTime > MaxWaitTime || c.WaitTime%time.Second != 0:
		return fmt.Errorf("inboxsqs: Config.WaitTime must be whole seconds up to %v, got %v", MaxWaitTime, c.WaitTime)
	case c.VisibilityTimeout < time.Second || c.VisibilityTimeout > MaxVisibilityTimeout || c.VisibilityTimeout%time.Second != 0:
		return fmt.Errorf("inboxsqs: Config.VisibilityTimeout must be whole seconds from 1s to %v, got %v", MaxVisibilityTimeout, c.VisibilityTimeout)
	case c.HeartbeatInterval <= 0 || c.HeartbeatInterval >= c.VisibilityTimeout:
		return fmt.Errorf("inboxsqs: Config.HeartbeatInterval must be positive and shorter than Config.VisibilityTimeout (%v), got %v", c.VisibilityTimeout, c.HeartbeatInterval)
	case c.MaxReceives < 0:
		return fmt.Errorf("inboxsqs: Config.MaxReceives must be positive, got %d", c.MaxReceives)
	case c.RetryBackoff < 0:
		return fmt.Errorf("inboxsqs: Config.RetryBackoff must not be negative, got %v", c.RetryBackoff)
	case c.MaxRetryBackoff < c.RetryBackoff || c.MaxRetryBackoff > MaxVisibilityTimeout:
		return fmt.Errorf("inboxsqs: Config.MaxRetryBackoff must be between Config.RetryBackoff (%v) and %v, got %v", c.RetryBackoff, MaxVisibilityTimeout, c.MaxRetryBackoff)
	}
	if err := inbox.ValidateConsumer(c.Consumer); err != nil {
		return fmt.Errorf("inboxsqs: Config.Consumer: %w", err)
	}
	return nil
}

// isFIFO reports whether queueURL names a FIFO queue: SQS requires their
// names to end in ".fifo".
func isFIFO(queueURL string) bool {
	return strings.HasSuffix(queueURL, ".fifo")
}
