package inboxnats

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxtransport"
)

// Defaults of the Config fields. The shared knobs' defaults are
// inboxtransport's (see inboxtransport.Settings).
const (
	DefaultWorkers         = inboxtransport.DefaultWorkers
	DefaultMaxBatch        = inboxtransport.DefaultMaxBatch
	DefaultFetchWait       = 500 * time.Millisecond
	DefaultMaxDeliveries   = inboxtransport.DefaultMaxDeliveries
	DefaultRetryBackoff    = inboxtransport.DefaultRetryBackoff
	DefaultMaxRetryBackoff = inboxtransport.DefaultMaxRetryBackoff
	DefaultShutdownTimeout = inboxtransport.DefaultShutdownTimeout
)

// Config configures a Consumer. Stream, Durable, Consumer and Key are
// required; every other field has a default. The knobs that every
// transport shares (Workers, MaxBatch, MaxDeliveries, MaxCrashes, RetryBackoff,
// MaxRetryBackoff, ShutdownTimeout, ReplayInterval, OnResult, Logger) are
// those of the embedded inboxtransport.Settings; docs/TRANSPORTS.md has
// them in one table. Here:
//   - MaxBatch is the most messages one Fetch asks for; size the JetStream
//     consumer's MaxAckPending to at least Workers × MaxBatch × 3: each
//     worker fetches its next batch while it processes one, and the acks
//     of the batch before are still on their way to the server (at × 2,
//     the fetch ahead waited for them: 14,000–17,000 msgs/s against
//     38,850 at × 4 in inboxlab bench's nats-inbox-batch-100);
//   - MaxDeliveries must not exceed the JetStream consumer's own
//     MaxDeliver, if that is set, or the server would drop a message the
//     inbox has not recorded (Run refuses it); it defaults to the smaller
//     of the two. Prefer MaxDeliver -1 (unlimited) on the JetStream
//     consumer. On the last delivery the server allows, a failure of the
//     message's own dead-letters it whatever was excused;
//   - a retried message gets NakWithDelay with the backoff, never a bare
//     Nak, which the server redelivers at once whatever the consumer's
//     BackOff (nats-io/nats-server#4726).
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
	// with outbox.HeaderEventID, inbox.HeaderKey("Nats-Msg-Id") (see MsgIDKey), or
	// inbox.JSONKey for a field of the payload. StreamSequenceKey is an
	// explicit opt-in that is wrong whenever one event can be published
	// twice; read its documentation first. Required: nothing in this
	// package ever mints an id.
	Key inbox.KeyFunc

	// FetchWait is how long one Fetch waits for its batch to fill before
	// it returns what it has. A JetStream Fetch returns early only with a
	// full batch, so under a trickle a message waits up to FetchWait
	// before its batch is processed, and an idle worker asks the server
	// again every FetchWait. Much shorter than 100ms, a message the server
	// sends to a fetch as the client gives up on it comes back only after
	// AckWait. Defaults to DefaultFetchWait (500ms, as Kafka's
	// fetch.max.wait.ms).
	FetchWait time.Duration

	// Ordered processes the stream's messages strictly in order: one
	// worker fetches and processes one message at a time. It needs a
	// JetStream consumer with MaxAckPending 1, which Run checks: the server
	// then delivers no other message while one is unacknowledged, whatever
	// the number of processes pulling from it, and a message that is
	// retried (NakWithDelay) holds back the ones after it. A dead-lettered
	// message is terminated and lets the next one through. Workers and
	// MaxBatch must be 0 or 1. Defaults to false: with several workers, or a
	// MaxAckPending above 1, a retried message comes back after later ones.
	Ordered bool

	// HeartbeatInterval is how long a message held by the consumer (from
	// its fetch until it is acknowledged, retried or terminated, the
	// message fetched ahead while a batch commits included) goes before it
	// is sent InProgress, which restarts the server's AckWait for it, so
	// that a slow transaction does not see its message delivered again
	// meanwhile. It must be shorter than the JetStream consumer's AckWait.
	// Defaults to a third of that AckWait.
	HeartbeatInterval time.Duration

	// DoubleAck acknowledges each committed message with DoubleAck, which
	// waits for the server to confirm the ack, instead of Ack. A lost ack is
	// harmless either way (the message comes back and the inbox skips it);
	// a confirmed ack makes that rarer, at the cost of a round trip per
	// message. Defaults to false.
	DoubleAck bool

	inboxtransport.Settings
}

func (c *Config) withDefaults() Config {
	out := *c
	if out.Ordered {
		out.Workers, out.MaxBatch = max(out.Workers, 1), max(out.MaxBatch, 1)
	}
	// MaxDeliveries defaults from the JetStream consumer's
	// configuration, which Run reads (resolve).
	out.Settings = out.Settings.WithDefaults()
	out.MaxDeliveries = c.MaxDeliveries
	out.FetchWait = cmp.Or(out.FetchWait, DefaultFetchWait)
	return out
}

func (c *Config) validate() error {
	if err := c.Settings.Validate(); err != nil {
		return fmt.Errorf("inboxnats: %w", err)
	}
	switch {
	case c.Stream == "":
		return errors.New("inboxnats: Config.Stream is required")
	case c.Durable == "":
		return errors.New("inboxnats: Config.Durable is required: create a pull consumer on the stream and name it here")
	case c.Key == nil:
		return errors.New("inboxnats: Config.Key is required: read the producer's event id with inbox.HeaderKey(outbox.HeaderEventID) or inbox.JSONKey")
	case c.Ordered && c.Workers != 1:
		return fmt.Errorf("inboxnats: Config.Workers must be 1 with Config.Ordered, got %d", c.Workers)
	case c.Ordered && c.MaxBatch != 1:
		return fmt.Errorf("inboxnats: Config.MaxBatch must be 1 with Config.Ordered, got %d", c.MaxBatch)
	case c.FetchWait < 0:
		return fmt.Errorf("inboxnats: Config.FetchWait must be positive, got %v", c.FetchWait)
	case c.HeartbeatInterval < 0:
		return fmt.Errorf("inboxnats: Config.HeartbeatInterval must not be negative, got %v", c.HeartbeatInterval)
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
// configuration: the MaxDeliveries and HeartbeatInterval defaults. It refuses a
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
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = ackWait / 3
	}
	if c.HeartbeatInterval >= ackWait {
		return c, fmt.Errorf("inboxnats: Config.HeartbeatInterval (%v) must be shorter than the JetStream consumer's AckWait (%v)", c.HeartbeatInterval, ackWait)
	}
	if c.MaxDeliveries == 0 {
		c.MaxDeliveries = DefaultMaxDeliveries
		if maxDeliver > 0 {
			c.MaxDeliveries = min(c.MaxDeliveries, maxDeliver)
		}
	}
	if maxDeliver > 0 && c.MaxDeliveries > maxDeliver {
		return c, fmt.Errorf("inboxnats: Config.MaxDeliveries (%d) exceeds the JetStream consumer's MaxDeliver (%d): the server would give up on a message before the inbox dead-letters it", c.MaxDeliveries, maxDeliver)
	}
	if c.Ordered && maxAckPending != 1 {
		return c, fmt.Errorf("inboxnats: Config.Ordered needs a JetStream consumer with MaxAckPending 1, and %s/%s has %d", c.Stream, c.Durable, maxAckPending)
	}
	return c, nil
}
