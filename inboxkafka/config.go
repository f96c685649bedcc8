package inboxkafka

import (
	"cmp"
	"errors"
	"fmt"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxtransport"
)

// Defaults of the Config fields. The shared knobs' defaults are
// inboxtransport's (see inboxtransport.Settings).
const (
	DefaultMaxBatch        = inboxtransport.DefaultMaxBatch
	DefaultMaxPollRecords  = 1000
	DefaultMaxBuffered     = 1000
	DefaultMaxDeliveries   = inboxtransport.DefaultMaxDeliveries
	DefaultRetryBackoff    = inboxtransport.DefaultRetryBackoff
	DefaultMaxRetryBackoff = inboxtransport.DefaultMaxRetryBackoff
	DefaultShutdownTimeout = inboxtransport.DefaultShutdownTimeout
	DefaultMaxCrashes      = inboxtransport.DefaultMaxCrashes
)

// Config configures a Consumer. Consumer and Key are required; every other
// field has a default. The knobs that every transport shares (MaxBatch,
// MaxDeliveries, MaxCrashes, RetryBackoff, MaxRetryBackoff,
// ShutdownTimeout, ReplayInterval, OnResult, Logger) are those of the embedded
// inboxtransport.Settings; docs/TRANSPORTS.md has them in one table. Kafka
// differs in these:
//   - Workers must be 0: each assigned partition has a worker of its own,
//     for a partition is Kafka's unit of order and of parallelism;
//   - MaxBatch is the most records of one partition processed in one
//     transaction, in offset order (inbox.Client.ProcessBatchOrdered);
//   - Kafka counts no deliveries: a record's attempts are counted in
//     memory, per assignment of its partition, and a rebalance or a restart
//     counts afresh;
//   - MaxCrashes, which bounds a record that takes its consumer down,
//     cannot count on the broker to flag a redelivery: when a consumer
//     takes a partition it records, in the store's takeover ledger, the
//     record it is about to process first, and clears that only when it
//     stops cleanly. Once the same record has been the first after
//     MaxCrashes takeovers in a row that found the owner before gone
//     down, it is dead-lettered with inbox.ReasonCrashedConsumer, without
//     running its handler, and the partition moves on. After any crash the
//     next owner processes 2×MaxBatch records one at a time, each offset
//     committed at once, so that a crash is pinned to its record and the
//     healthy records around it are applied. In steady state it costs one
//     write per takeover and one at a clean stop, none per record;
//   - a record that failed is tried again in place after RetryBackoff
//     (doubling, with jitter, up to MaxRetryBackoff): its partition holds
//     its place meanwhile;
//   - ShutdownTimeout also bounds a revoke's wait for the transactions in
//     flight, and, separately, the retries of the offset commit that
//     follows, so a revoke takes at most twice ShutdownTimeout: keep that
//     under the group's rebalance timeout (kgo.RebalanceTimeout, 60s by
//     default). A handler that ignores its context's cancellation holds
//     the revoke up until it returns.
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

	// MaxPollRecords is the most records taken from the client in one
	// poll, across partitions. Defaults to DefaultMaxPollRecords (1000).
	MaxPollRecords int

	// MaxBuffered is how many records may wait for a partition's worker
	// before fetching that partition is paused. Fetching resumes when
	// half of them are done. It must be at least MaxBatch. Defaults to
	// DefaultMaxBuffered (1000), or MaxBatch when that is larger.
	MaxBuffered int

	// DeadLetterTopic, when set, is a topic to which a dead-lettered
	// record is also produced, after it is stored in the dead-letter
	// table and before its offset is committed. The copy keeps the
	// record's key, value and headers, and adds the headers named by
	// the HeaderDeadLetter constants. The client must not consume this
	// topic. Defaults to "", which produces nothing.
	DeadLetterTopic string

	inboxtransport.Settings
}

func (c *Config) withDefaults() Config {
	var out Config
	if c != nil {
		out = *c
	}
	workers := out.Workers
	out.Settings = out.Settings.WithDefaults()
	out.Workers = workers
	out.MaxPollRecords = cmp.Or(out.MaxPollRecords, DefaultMaxPollRecords)
	out.MaxBuffered = cmp.Or(out.MaxBuffered, max(DefaultMaxBuffered, out.MaxBatch))
	return out
}

func (c *Config) validate() error {
	if err := c.Settings.Validate(); err != nil {
		return fmt.Errorf("inboxkafka: %w", err)
	}
	switch {
	case c.Consumer == "":
		return errors.New("inboxkafka: Config.Consumer is required: name the inbox consumer, such as \"billing\"")
	case c.Key == nil:
		return errors.New("inboxkafka: Config.Key is required: read the producer's event id, such as inbox.HeaderKey(\"event-id\"); there is no default")
	case c.Workers != 0:
		return fmt.Errorf("inboxkafka: Config.Workers must be 0, got %d: each assigned partition has a worker of its own", c.Workers)
	case c.MaxPollRecords < 0:
		return fmt.Errorf("inboxkafka: Config.MaxPollRecords must be positive, got %d", c.MaxPollRecords)
	case c.MaxBuffered < c.MaxBatch:
		return fmt.Errorf("inboxkafka: Config.MaxBuffered (%d) must be at least Config.MaxBatch (%d)", c.MaxBuffered, c.MaxBatch)
	}
	if err := inbox.ValidateConsumer(c.Consumer); err != nil {
		return fmt.Errorf("inboxkafka: Config.Consumer: %w", err)
	}
	return nil
}

// Result is what the consumer did with one record on one try: its
// Message's Source holds the record's topic (Queue), partition and
// offset. Config.OnResult receives it.
type Result = inboxtransport.Result
