package inboxtransport

import (
	"fmt"
	"log/slog"
	"time"
)

// Defaults of the Settings.
const (
	DefaultWorkers         = 2
	DefaultMaxBatch        = 50
	DefaultMaxDeliveries   = 5
	DefaultMaxCrashes      = 3
	DefaultRetryBackoff    = time.Second
	DefaultMaxRetryBackoff = time.Minute
	DefaultShutdownTimeout = 10 * time.Second
	DefaultReplayInterval  = 10 * time.Second
	DefaultStreakLimit     = 5
	DefaultStreakPause     = 5 * time.Second
)

// Settings are the knobs that every transport adapter's Config shares,
// with one name, one default, one validation and one meaning: each
// Config embeds them. docs/TRANSPORTS.md has them in one table, with what
// each broker makes of them. A zero value takes the default.
type Settings struct {
	// Workers is how many batches are processed at once. Each worker
	// receives its next batch while it processes the current one: at
	// most one batch ahead. Defaults to DefaultWorkers (2). Kafka has one
	// worker per assigned partition instead, and refuses it.
	Workers int

	// MaxBatch is the most messages one receive takes, processed as one
	// batch: one claim statement and one transaction when no handler
	// fails, a failing message isolated from its batch-mates. Defaults to
	// DefaultMaxBatch (50), or the broker's own limit when lower (SQS
	// returns at most 10 per receive).
	MaxBatch int

	// MaxDeliveries bounds redelivery: a message whose handler fails
	// with an error of its own (inbox.Judge: inbox.FaultMessage) on its
	// MaxDeliveries-th attempt is dead-lettered with
	// inbox.ReasonMaxAttempts instead of retried. An attempt is the
	// broker's delivery count where it keeps one, less this process's
	// deliveries of the message that were not attempts; else this
	// process's count of the message's own failures. Failures that say
	// nothing about the message (the store's, whatever its code, one the
	// handler marked inbox.Unavailable, a lock timeout behind a concurrent
	// delivery, shutdown, the streak breaker open) are not attempts and
	// never dead-letter. Defaults to DefaultMaxDeliveries (5).
	MaxDeliveries int

	// MaxCrashes bounds a message that takes its consumer process down
	// without returning an error (an out-of-memory kill, a panic on a
	// goroutine the handler started, os.Exit in a dependency), which no
	// count kept in memory can see. A delivery that the broker says it
	// delivered before, and that this process has no earlier delivery of,
	// is a suspect: its last delivery may have taken a process down. A
	// suspect runs alone, one at a time across the consumer, marked in the
	// store's takeover ledger (inboxtransport.Ledger) while it runs; a
	// process that dies running it leaves the mark, and the next delivery
	// counts it. Once a message has taken MaxCrashes consumers down in a
	// row, it is dead-lettered with inbox.ReasonCrashedConsumer and
	// settled, without its handler running again, unless the inbox shows
	// that it was applied after all. A first delivery costs nothing; a
	// suspect costs a transaction of its own and three small writes.
	// Kafka, whose broker counts no deliveries, marks the first record of
	// each partition it takes over instead (see inboxkafka). Negative
	// turns the bound off. Defaults to DefaultMaxCrashes (3).
	MaxCrashes int

	// RetryBackoff is how long a message whose handler failed with a
	// retryable error waits before it is tried again, so that a failing
	// message does not spin: handed back to the broker for that long, or
	// held and tried again in place where the broker cannot keep its
	// place (Kafka, an ordered RabbitMQ queue). It doubles with each
	// delivery of the message, up to MaxRetryBackoff. It is also how long
	// receiving pauses after the store was unavailable, doubling while it
	// stays so. Defaults to DefaultRetryBackoff (1s).
	RetryBackoff time.Duration

	// MaxRetryBackoff caps RetryBackoff's doubling. Defaults to
	// DefaultMaxRetryBackoff (1m), or RetryBackoff when that is longer.
	MaxRetryBackoff time.Duration

	// ShutdownTimeout is how long, after Run's context is done, the
	// batches already being processed get to finish, commit and be
	// acknowledged; then their contexts are cancelled, they roll back and
	// go back to the broker. Messages received and not started go back at
	// once. Negative cancels at once. Defaults to DefaultShutdownTimeout
	// (10s).
	ShutdownTimeout time.Duration

	// ReplayInterval is how often the consumer processes the dead
	// letters of its inbox consumer that an operator marked for replay
	// ('inbox deadletters replay', the admin page), with its handler
	// (inbox.Client.ProcessReplays), from the start of Run. Negative turns
	// replays off, for an application that calls ProcessReplays itself.
	// Defaults to DefaultReplayInterval (10s).
	ReplayInterval time.Duration

	// StreakLimit is how many distinct messages in a row may fail with
	// the same class of error before the consumer's streak breaker
	// decides that the cause is not the messages: it stops counting
	// attempts, so that it dead-letters none of them, pauses the
	// consumer for StreakPause, and probes (see Breaker). A success
	// closes it. Keep it small: up to StreakLimit - 1 healthy messages
	// can use up their attempts before it opens. Negative disables the
	// breaker. Defaults to DefaultStreakLimit (5).
	StreakLimit int

	// StreakPause is the first pause of a consumer whose streak breaker
	// opened. It doubles while the probes fail, up to 16 times. Defaults
	// to DefaultStreakPause (5s).
	StreakPause time.Duration

	// OnResult, when set, is called with what became of each message the
	// consumer tried: processed, failed (to be tried again), or
	// dead-lettered. It is called from the workers, concurrently; it must
	// be quick and must not block. Defaults to nil.
	OnResult func(Result)

	// Logger receives the consumer's logs: failed receives and acks,
	// retries, dead letters, outages. Defaults to nil, which is silent.
	Logger *slog.Logger
}

// WithDefaults returns s with a default in each zero field.
func (s Settings) WithDefaults() Settings {
	if s.Workers == 0 {
		s.Workers = DefaultWorkers
	}
	if s.MaxBatch == 0 {
		s.MaxBatch = DefaultMaxBatch
	}
	if s.MaxDeliveries == 0 {
		s.MaxDeliveries = DefaultMaxDeliveries
	}
	if s.MaxCrashes == 0 {
		s.MaxCrashes = DefaultMaxCrashes
	}
	if s.RetryBackoff == 0 {
		s.RetryBackoff = DefaultRetryBackoff
	}
	if s.MaxRetryBackoff == 0 {
		s.MaxRetryBackoff = max(DefaultMaxRetryBackoff, s.RetryBackoff)
	}
	if s.ShutdownTimeout == 0 {
		s.ShutdownTimeout = DefaultShutdownTimeout
	}
	if s.ReplayInterval == 0 {
		s.ReplayInterval = DefaultReplayInterval
	}
	if s.StreakLimit == 0 {
		s.StreakLimit = DefaultStreakLimit
	}
	if s.StreakPause == 0 {
		s.StreakPause = DefaultStreakPause
	}
	return s
}

// Validate returns an error naming the first field of s that is out of
// range, as a Config field ("Config.Workers ...").
func (s Settings) Validate() error {
	switch {
	case s.Workers < 0:
		return fmt.Errorf("Config.Workers must be positive, got %d", s.Workers)
	case s.MaxBatch < 0:
		return fmt.Errorf("Config.MaxBatch must be positive, got %d", s.MaxBatch)
	case s.MaxDeliveries < 0:
		return fmt.Errorf("Config.MaxDeliveries must be positive, got %d", s.MaxDeliveries)
	case s.RetryBackoff < 0:
		return fmt.Errorf("Config.RetryBackoff must not be negative, got %v", s.RetryBackoff)
	case s.MaxRetryBackoff < s.RetryBackoff:
		return fmt.Errorf("Config.MaxRetryBackoff must be at least Config.RetryBackoff (%v), got %v", s.RetryBackoff, s.MaxRetryBackoff)
	case s.StreakPause < 0:
		return fmt.Errorf("Config.StreakPause must not be negative, got %v", s.StreakPause)
	}
	return nil
}
