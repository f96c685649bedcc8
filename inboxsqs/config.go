package inboxsqs

import (
	"cmp"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxtransport"
)

// Defaults of the Config fields. The shared knobs' defaults are
// inboxtransport's (see inboxtransport.Settings), but for MaxBatch, which
// SQS limits to MaxMessagesLimit.
const (
	DefaultWorkers           = inboxtransport.DefaultWorkers
	DefaultMaxBatch          = MaxMessagesLimit
	DefaultWaitTime          = 20 * time.Second
	DefaultVisibilityTimeout = 30 * time.Second
	DefaultMaxDeliveries     = inboxtransport.DefaultMaxDeliveries
	DefaultRetryBackoff      = inboxtransport.DefaultRetryBackoff
	DefaultMaxRetryBackoff   = inboxtransport.DefaultMaxRetryBackoff
	DefaultShutdownTimeout   = inboxtransport.DefaultShutdownTimeout
)

// Limits that SQS places on the Config fields.
const (
	// MaxMessagesLimit is the most messages one ReceiveMessage returns and
	// one DeleteMessageBatch deletes: the most Config.MaxBatch can be.
	MaxMessagesLimit = 10
	// MaxWaitTime is the longest long poll.
	MaxWaitTime = 20 * time.Second
	// MaxVisibilityTimeout is the longest visibility timeout, and the
	// longest a received message can be kept invisible in total.
	MaxVisibilityTimeout = 12 * time.Hour
)

// Config configures a Consumer. QueueURL, Consumer and Key are required;
// every other field has a default. The knobs that every transport shares
// (Workers, MaxBatch, MaxDeliveries, MaxCrashes, RetryBackoff, MaxRetryBackoff,
// ShutdownTimeout, ReplayInterval, OnResult, Logger) are those of the
// embedded inboxtransport.Settings; docs/TRANSPORTS.md has them in one
// table. Here:
//   - Workers are how many receives (standard queue) or message groups
//     (FIFO queue) are processed at once; on a FIFO queue one poller feeds
//     the workers, so that a group's messages stay in the order they were
//     handed out;
//   - MaxBatch is the most messages one ReceiveMessage asks for, from 1 to
//     MaxMessagesLimit (10), which is also its default;
//   - an attempt counts the message's ApproximateReceiveCount; set the
//     queue's own redrive policy, if any, to a maxReceiveCount well above
//     MaxDeliveries, so that SQS does not move a message the inbox has not
//     recorded;
//   - a retried message is given the backoff as its visibility timeout,
//     rounded up to whole seconds; MaxRetryBackoff is at most
//     MaxVisibilityTimeout (12h).
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
	// for its group or its worker, while its handler runs, until it is
	// deleted or released. It must be shorter than VisibilityTimeout.
	// Defaults to a third of VisibilityTimeout.
	HeartbeatInterval time.Duration

	// DeadLetterQueueURL, when set, is a queue that also receives a copy
	// of each dead-lettered message (same body and attributes), after the
	// dead-letter store has it and before the original is deleted. A FIFO
	// dead-letter queue gets the original's group and its MessageId as the
	// deduplication id. Defaults to "" (the dead-letter store only).
	DeadLetterQueueURL string

	inboxtransport.Settings
}

func (c *Config) withDefaults() Config {
	out := *c
	out.MaxBatch = cmp.Or(out.MaxBatch, DefaultMaxBatch)
	out.Settings = out.Settings.WithDefaults()
	out.WaitTime = cmp.Or(out.WaitTime, DefaultWaitTime)
	out.VisibilityTimeout = cmp.Or(out.VisibilityTimeout, DefaultVisibilityTimeout)
	out.HeartbeatInterval = cmp.Or(out.HeartbeatInterval, out.VisibilityTimeout/3)
	return out
}

func (c *Config) validate() error {
	if err := c.Settings.Validate(); err != nil {
		return fmt.Errorf("inboxsqs: %w", err)
	}
	switch {
	case c.QueueURL == "":
		return errors.New("inboxsqs: Config.QueueURL is required")
	case c.Key == nil:
		return errors.New("inboxsqs: Config.Key is required: read the producer's event id with inbox.JSONKey or inbox.HeaderKey")
	case c.MaxBatch < 0 || c.MaxBatch > MaxMessagesLimit:
		return fmt.Errorf("inboxsqs: Config.MaxBatch must be between 1 and %d, got %d", MaxMessagesLimit, c.MaxBatch)
	case c.WaitTime < 0 || c.WaitTime > MaxWaitTime || c.WaitTime%time.Second != 0:
		return fmt.Errorf("inboxsqs: Config.WaitTime must be whole seconds up to %v, got %v", MaxWaitTime, c.WaitTime)
	case c.VisibilityTimeout < time.Second || c.VisibilityTimeout > MaxVisibilityTimeout || c.VisibilityTimeout%time.Second != 0:
		return fmt.Errorf("inboxsqs: Config.VisibilityTimeout must be whole seconds from 1s to %v, got %v", MaxVisibilityTimeout, c.VisibilityTimeout)
	case c.HeartbeatInterval <= 0 || c.HeartbeatInterval >= c.VisibilityTimeout:
		return fmt.Errorf("inboxsqs: Config.HeartbeatInterval must be positive and shorter than Config.VisibilityTimeout (%v), got %v", c.VisibilityTimeout, c.HeartbeatInterval)
	case c.MaxRetryBackoff > MaxVisibilityTimeout:
		return fmt.Errorf("inboxsqs: Config.MaxRetryBackoff must be at most %v, got %v", MaxVisibilityTimeout, c.MaxRetryBackoff)
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
