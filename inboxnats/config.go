package inboxnats

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/txinbox/inbox"
)

// Defaults of the Config fields.
const (
	DefaultWorkers         = 2
	DefaultBatch           = 50
	DefaultFetchWait       = 5 * time.Second
	DefaultMaxDeliver      = 5
	DefaultRetryBackoff    = time.Second
	DefaultMaxRetryBackoff = 5 * time.Minute
	DefaultShutdownTimeout = 30 * time.Second
)

// Config configures a Consumer. Stream, Durable, Consumer and Key are
// required; every other field has a default.
type Config struct {
	// Stream is the JetStream stream to consume. Required.
	Stream string

	// Durable is the name of the pull consumer on Stream to fetch from. The
	// application creates it, with its own AckWait, MaxDeliver,
	// MaxAckPending and filter; Run reads its configuration and refuses one
	// whose AckPolicy is not AckExplicitPolicy. Required.
	Durable string

	// Consumer is the inbox consumer name: the skip set this consumer's
	// messages are recorded in. It is not the JetStream consumer's name.
	// Keep it stable. Required.
	Consumer string

	// Key reads the producer's event id from a message: inbox.HeaderKey
	// with HeaderEventID, inbox.HeaderKey("Nats-Msg-Id") (see MsgIDKey), or
	// inbox.JSONKey for a field of the payload. StreamSequenceKey is an
	// explicit opt-in that is wrong whenever one event can be published
	// twice; read its documentation first. Required: nothing in this
	// package ever mints an id.
	Key inbox.KeyFunc

	// Workers is how many fetch-and-process loops run at once, each with a
	// batch of its own. Size the JetStream consumer's MaxAckPending to at
	// least Workers × Batch. Defaults to DefaultWorkers (2), or 1 when
	// Ordered.
	Workers int

	// Batch is the most messages one Fetch asks for. The messages one fetch
	// returns are processed as one batch: one claim statement and one
	// transaction when no handler fails. Defaults to DefaultBatch (50), or 1
	// when Ordered.
	Batch int

	// FetchWait is how long one Fetch waits for its batch to fill before
	// it returns what it has. Defaults to DefaultFetchWait (5s).
	FetchWait time.Duration

	// Ordered processes the stream's messages strictly in order: one
	// worker fetches and processes one message at a time. It needs a
	// JetStream consumer with MaxAckPending 1, which Run checks: the server
	// then delivers no other message while one is unacknowledged, whatever
	// the number of processes pulling from it, and a message that is
	// retried (NakWithDelay) holds back the ones after it. A dead-lettered
	// message is terminated and lets the next one through. Workers and
	// Batch must be 0 or 1. Defaults to false: with several workers, or a
	// MaxAckPending above 1, a retried message comes back after later ones.
	Ordered bool

	// MaxDeliver bounds redelivery. A message whose handler fails with a
	// retryable error of its own on a delivery whose NumDelivered, less
	// the deliveries that were not attempts, has reached MaxDeliver is
	// dead-lettered and terminated instead of retried. Failures that say
	// nothing about the message (inbox.Judge: the store's, whatever its
	// code, one the handler marked inbox.Unavailable, a lock timeout
	// behind a concurrent delivery, shutdown, the streak breaker open) are
	// not attempts and never dead-letter. It must not exceed the JetStream consumer's own
	// MaxDeliver, if that is set, or the server would drop a message the
	// inbox has not recorded; prefer MaxDeliver -1 (unlimited) on the
	// JetStream consumer. Defaults to the JetStream consumer's MaxDeliver
	// when that is set, else DefaultMaxDeliver (5).
	MaxDeliver int

	// RetryBackoff is the delay of the NakWithDelay that a message whose
	// handler failed with a retryable error gets, so that it comes back
	// after a pause rather than at once (a bare Nak ignores the consumer's
	// BackOff, nats-io/nats-server#4726). It doubles with each delivery of
	// the message, up to MaxRetryBackoff. It is also how long fetching
	// pauses after the store was unavailable, doubling while it stays so.
	// Defaults to DefaultRetryBackoff (1s).
	RetryBackoff time.Duration

	// MaxRetryBackoff caps RetryBackoff's doubling. Defaults to
	// DefaultMaxRetryBackoff (5m).
	MaxRetryBackoff time.Duration

	// Heartbeat is how often a message held by the consumer (from its
	// fetch until it is acknowledged, retried or terminated) is sent
	// InProgress, which restarts the server's AckWait for it, so that a
	// slow transaction does not see its message delivered again meanwhile.
	// It must be shorter than the JetStream consumer's AckWait. Defaults to
	// a third of that AckWait.
	Heartbeat time.Duration

	// DoubleAck acknowledges each committed message with DoubleAck, which
	// waits for the server to confirm the ack, instead of Ack. A lost ack is
	// harmless either way (the message comes back and the inbox skips it);
	// a confirmed ack makes that rarer, at the cost of a round trip per
	// message. Defaults to false.
	DoubleAck bool

	// ShutdownTimeout is how long, after Run's context is done, the
	// messages already being processed get to finish, commit and be
	// acknowledged. Then their contexts are cancelled and they are released
	// for redelivery. Negative cancels them at once. Defaults to
	// DefaultShutdownTimeout (30s).
	ShutdownTimeout time.Duration

	// Logger receives the consumer's logs: failed fetches and acks,
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
	if out.FetchWait == 0 {
		out.FetchWait = DefaultFetchWait
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
	// MaxDeliver and Heartbeat default from the JetStream consumer's
	// configuration, which Run reads (resolve).
	return out
}

func (c *Config) validate() error {
	switch {
	case c.Stream == "":
		return errors.New("inboxnats: Config.Stream is required")
	case c.Durable == "":
		return errors.New("inboxnats: Config.Durable is required: create a pull consumer on the stream and name it here")
	case c.Key == nil:
		return errors.New("inboxnats: Config.Key is required: read the producer's event id with inbox.HeaderKey(inboxnats.HeaderEventID) or inbox.JSONKey")
	case c.Workers < 0:
		return fmt.Errorf("inboxnats: Config.Workers must be positive, got %d", c.Workers)
	case c.Batch < 0:
		return fmt.Errorf("inboxnats: Config.Batch must be positive, got %d", c.Batch)
	case c.Ordered && c.Workers != 1:
		return fmt.Errorf("inboxnats: Config.Workers must be 1 with Config.Ordered, got %d", c.Workers)
	case c.Ordered && c.Batch != 1:
		return fmt.Errorf("inboxnats: Config.Batch must be 1 with Config.Ordered, got %d", c.Batch)
	case c.FetchWait < 0:
		return fmt.Errorf("inboxnats: Config.FetchWait must be positive, got %v", c.FetchWait)
	case c.MaxDeliver < 0:
		return fmt.Errorf("inboxnats: Config.MaxDeliver must be positive, got %d", c.MaxDeliver)
	case c.RetryBackoff < 0:
		return fmt.Errorf("inboxnats: Config.RetryBackoff must not be negative, got %v", c.RetryBackoff)
	case c.MaxRetryBackoff < c.RetryBackoff:
		return fmt.Errorf("inboxnats: Config.MaxRetryBackoff must be at least Config.RetryBackoff (%v), got %v", c.RetryBackoff, c.MaxRetryBackoff)
	case c.Heartbeat < 0:
		return fmt.Errorf("inboxnats: Config.Heartbeat must not be negative, got %v", c.Heartbeat)
	}
	if err := inbox.ValidateConsumer(c.Consumer); err != nil {
		return fmt.Errorf("inboxnats: Config.Consumer: %w", err)
	}
	return nil
}

// serverDefaultAckWait is the AckWait of a JetStream consumer that sets
// none.
const serverDefaultAckWait = 30 * time.Second

// resolve completes c with what it takes from the JetStream consumer's
// configuration: the MaxDeliver and Heartbeat defaults. It refuses a
// consumer the inbox cannot work with.
func (c Config) resolve(cc jetstream.ConsumerConfig) (Config, error) {
	if cc.AckPolicy != jetstream.AckExplicitPolicy {
		return c, fmt.Errorf("inboxnats: JetStream consumer %s/%s has %v: the inbox acknowledges each message after its commit, so it needs AckExplicitPolicy", c.Stream, c.Durable, cc.AckPolicy)
	}
	if cc.DeliverSubject != "" {
		return c, fmt.Errorf("inboxnats: JetStream consumer %s/%s is a push consumer: create a pull consumer", c.Stream, c.Durable)
	}
	ackWait, maxDeliver, maxAckPending := cc.AckWait, cc.MaxDeliver, cc.MaxAckPending
	if ackWait <= 0 {
		ackWait = serverDefaultAckWait
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = ackWait / 3
	}
	if c.Heartbeat >= ackWait {
		return c, fmt.Errorf("inboxnats: Config.Heartbeat (%v) must be shorter than the JetStream consumer's AckWait (%v)", c.Heartbeat, ackWait)
	}
	if c.MaxDeliver == 0 {
		c.MaxDeliver = DefaultMaxDeliver
		if maxDeliver > 0 {
			c.MaxDeliver = maxDeliver
		}
	}
	if maxDeliver > 0 && c.MaxDeliver > maxDeliver {
		return c, fmt.Errorf("inboxnats: Config.MaxDeliver (%d) exceeds the JetStream consumer's MaxDeliver (%d): the server would give up on a message before the inbox dead-letters it", c.MaxDeliver, maxDeliver)
	}
	if c.Ordered && maxAckPending != 1 {
		return c, fmt.Errorf("inboxnats: Config.Ordered needs a JetStream consumer with MaxAckPending 1, and %s/%s has %d", c.Stream, c.Durable, maxAckPending)
	}
	return c, nil
}
