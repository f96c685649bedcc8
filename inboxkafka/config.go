package inboxkafka

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txinbox/inbox"
)

// Defaults of the Config fields.
const (
	DefaultMaxBatch       = 100
	DefaultMaxPollRecords = 1000
	DefaultMaxBuffered    = 1000
	DefaultMaxAttempts    = 10
	DefaultMaxCrashes     = 3
	DefaultMinBackoff     = 100 * time.Millisecond
	DefaultMaxBackoff     = 10 * time.Second
	DefaultDrainTimeout   = 10 * time.Second
)

// Config configures a Consumer. Consumer and Key are required; every other
// field has a default.
type Config struct {
	// Consumer is the inbox consumer name: the inbox keeps one set of
	// applied ids per name. Keep it stable: a renamed consumer has an
	// empty inbox and applies every redelivered record again. It is
	// independent of the Kafka group name. Required.
	Consumer string

	// Key reads the producer's event id from a record, for example
	// inbox.HeaderKey("event-id") or inbox.JSONKey("event_id"). A record
	// whose id is missing or malformed is dead-lettered, never applied.
	// There is no default: transport coordinates are not an event's
	// identity (see OffsetKey for the opt-in and how it fails). Required.
	Key inbox.KeyFunc

	// MaxBatch is the most records of one partition that are processed
	// in one transaction, through inbox.Client.ProcessBatchOrdered. 1
	// processes each record in its own transaction. Defaults to
	// DefaultMaxBatch (100).
	MaxBatch int

	// MaxPollRecords is the most records taken from the client in one
	// poll, across partitions. Defaults to DefaultMaxPollRecords (1000).
	MaxPollRecords int

	// MaxBuffered is how many records may wait for a partition's worker
	// before fetching that partition is paused. Fetching resumes when
	// half of them are done. It must be at least MaxBatch. Defaults to
	// DefaultMaxBuffered (1000), or MaxBatch when that is larger.
	MaxBuffered int

	// MaxAttempts is how many times a record's handler may fail with a
	// retryable error before the record is dead-lettered with
	// inbox.ReasonMaxAttempts. Attempts are counted in memory, per
	// assignment of the partition: a rebalance or a restart counts
	// afresh. Only the record's own failures are attempts
	// (inbox.FaultMessage, see inbox.Judge): a failure of the store
	// (begin, claim, commit, dead-letter write, whatever its code), of the
	// handler's connection, one the handler marked inbox.Unavailable, a
	// lock timeout behind another delivery of the same id, and any
	// failure while the streak breaker is open (inboxtransport.Breaker)
	// are not.
	// Defaults to DefaultMaxAttempts (10).
	MaxAttempts int

	// MaxCrashes bounds a record that takes its consumer down without
	// returning an error (an out-of-memory kill, a panic on a goroutine
	// the handler started, os.Exit in a dependency), which no attempt
	// count in memory can see. When a consumer takes a partition it
	// records, in the store's takeover ledger, the record it is about to
	// process first, and clears that only when it stops cleanly; once the
	// same record has been the first after MaxCrashes takeovers in a row
	// that found the owner before gone down, it is dead-lettered with
	// inbox.ReasonCrashedConsumer, without running its handler, and the
	// partition moves on. After any crash the next owner processes
	// 2×MaxBatch records one at a time, each offset committed at once, so
	// that a crash is pinned to its record and the healthy records around
	// it are applied. In steady state it costs one write per takeover and
	// one at a clean stop, none per record. Negative turns the bound off.
	// Defaults to DefaultMaxCrashes (3).
	MaxCrashes int

	// MinBackoff is the first wait before a failed record is tried
	// again, and before a failed offset commit is sent again. The wait
	// doubles on each consecutive failure, with jitter, up to
	// MaxBackoff. Its partition holds its place meanwhile. Defaults to
	// DefaultMinBackoff (100ms).
	MinBackoff time.Duration

	// MaxBackoff caps the wait between tries. Defaults to
	// DefaultMaxBackoff (10s), or MinBackoff when that is larger.
	MaxBackoff time.Duration

	// DrainTimeout bounds how long a revoke, or Run's return, waits for
	// the transactions in flight to finish; then they are abandoned and
	// roll back. It also bounds, separately, the retries of the offset
	// commit that follows, so a revoke takes at most twice DrainTimeout:
	// keep that under the group's rebalance timeout (kgo.RebalanceTimeout,
	// 60s by default). A handler that ignores its context's cancellation
	// holds the revoke up until it returns. Defaults to
	// DefaultDrainTimeout (10s).
	DrainTimeout time.Duration

	// DeadLetterTopic, when set, is a topic to which a dead-lettered
	// record is also produced, after it is stored in the dead-letter
	// table and before its offset is committed. The copy keeps the
	// record's key, value and headers, and adds the headers named by
	// the HeaderDeadLetter constants. The client must not consume this
	// topic. Defaults to "", which produces nothing.
	DeadLetterTopic string

	// Logger receives the consumer's logs. Defaults to nil, which is
	// silent.
	Logger *slog.Logger

	// OnResult, when set, is called with what happened to each record
	// the consumer tried: processed, failed (and to be tried again), or
	// dead-lettered. It is called from the partitions' workers,
	// concurrently; it must be quick and must not block. Defaults to
	// nil.
	OnResult func(Result)
}

func (c *Config) withDefaults() Config {
	var out Config
	if c != nil {
		out = *c
	}
	if out.MaxBatch == 0 {
		out.MaxBatch = DefaultMaxBatch
	}
	if out.MaxPollRecords == 0 {
		out.MaxPollRecords = DefaultMaxPollRecords
	}
	if out.MaxBuffered == 0 {
		out.MaxBuffered = max(DefaultMaxBuffered, out.MaxBatch)
	}
	if out.MaxAttempts == 0 {
		out.MaxAttempts = DefaultMaxAttempts
	}
	if out.MaxCrashes == 0 {
		out.MaxCrashes = DefaultMaxCrashes
	}
	if out.MinBackoff == 0 {
		out.MinBackoff = DefaultMinBackoff
	}
	if out.MaxBackoff == 0 {
		out.MaxBackoff = max(DefaultMaxBackoff, out.MinBackoff)
	}
	if out.DrainTimeout == 0 {
		out.DrainTimeout = DefaultDrainTimeout
	}
	return out
}

func (c *Config) validate() error {
	switch {
	case c.Consumer == "":
		return errors.New("inboxkafka: Config.Consumer is required: name the inbox consumer, such as \"billing\"")
	case c.Key == nil:
		return errors.New("inboxkafka: Config.Key is required: read the producer's event id, such as inbox.HeaderKey(\"event-id\"); there is no default")
	case c.MaxBatch < 0:
		return fmt.Errorf("inboxkafka: Config.MaxBatch must be positive, got %d", c.MaxBatch)
	case c.MaxPollRecords < 0:
		return fmt.Errorf("inboxkafka: Config.MaxPollRecords must be positive, got %d", c.MaxPollRecords)
	case c.MaxBuffered < c.MaxBatch:
		return fmt.Errorf("inboxkafka: Config.MaxBuffered (%d) must be at least Config.MaxBatch (%d)", c.MaxBuffered, c.MaxBatch)
	case c.MaxAttempts < 0:
		return fmt.Errorf("inboxkafka: Config.MaxAttempts must be positive, got %d", c.MaxAttempts)
	case c.MinBackoff < 0:
		return fmt.Errorf("inboxkafka: Config.MinBackoff must be positive, got %v", c.MinBackoff)
	case c.MaxBackoff < c.MinBackoff:
		return fmt.Errorf("inboxkafka: Config.MaxBackoff (%v) must not be shorter than Config.MinBackoff (%v)", c.MaxBackoff, c.MinBackoff)
	case c.DrainTimeout < 0:
		return fmt.Errorf("inboxkafka: Config.DrainTimeout must be positive, got %v", c.DrainTimeout)
	}
	if err := inbox.ValidateConsumer(c.Consumer); err != nil {
		return fmt.Errorf("inboxkafka: Config.Consumer: %w", err)
	}
	return nil
}

// Result is what the consumer did with one record on one try. Config.OnResult
// receives it.
type Result struct {
	// Record is the record. Do not modify it.
	Record *kgo.Record
	// ID is the record's canonical event id, or "" when its KeyFunc
	// found none or a malformed one.
	ID string
	// Outcome is inbox.Applied or inbox.Duplicate when the record was
	// processed, and zero otherwise.
	Outcome inbox.Outcome
	// Err is why the record was not processed, or nil.
	Err error
	// Fault is whose fault Err is (inbox.Judge); FaultNone without Err.
	Fault inbox.Fault
	// Attempts is how many times the record's handler has failed with a
	// retryable error, counting this try.
	Attempts int
	// DeadLettered reports that the record was stored in the dead-letter
	// table (and produced to Config.DeadLetterTopic, if set). Its
	// partition moves on past it.
	DeadLettered bool
}
