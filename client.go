package inbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/txinbox/inbox/inboxdriver"
)

// Defaults of the Config fields.
const (
	DefaultLockTimeout        = 5 * time.Second
	DefaultMaxConflictRetries = 5
	DefaultConflictBackoff    = 10 * time.Millisecond
	DefaultReplayHorizon      = 14 * 24 * time.Hour
	DefaultRetention          = 30 * 24 * time.Hour
	DefaultPurgeBatchSize     = 10_000
	DefaultPurgeRest          = 3.0
	DefaultCleanerInterval    = time.Hour
)

// maxConflictBackoff caps the exponential backoff between conflict retries.
const maxConflictBackoff = time.Second

// Config configures a Client. The zero value is valid: every field has a
// default.
type Config struct {
	// Logger receives the client's logs. Defaults to nil, which is silent.
	Logger *slog.Logger

	// IDFormat is the form of the producers' event ids. Ids are validated
	// and canonicalised to it before they are claimed. IDFormatULID and
	// IDFormatText need a store whose id column is text. Defaults to
	// IDFormatUUID.
	IDFormat IDFormat

	// LockTimeout bounds how long a claim waits behind an uncommitted claim
	// of the same message by another transaction (a concurrent duplicate
	// delivery while the first is still in flight), or behind a lock on the
	// whole inbox table, including on a connection that has not prepared
	// the claim yet. When it runs out, the claim fails with ErrLockTimeout,
	// which is retryable. It applies only to the claim, not to the
	// handler's statements. Negative means wait without limit. Defaults to
	// DefaultLockTimeout (5s).
	//
	// On Postgres (inboxpgx) the bound costs two statements in the claim's
	// round trip, which set lock_timeout and restore it, unless the pool's
	// sessions already have lock_timeout equal to it (set
	// pgxpool.Config.ConnConfig.RuntimeParams["lock_timeout"], in
	// milliseconds); the handler's statements then have that bound too.
	LockTimeout time.Duration

	// MaxConflictRetries is how many times a transaction that failed with a
	// serialization failure or a deadlock is run again, from the claim, with
	// exponential backoff. Negative disables retries. Defaults to
	// DefaultMaxConflictRetries (5).
	MaxConflictRetries int

	// ConflictBackoff is the first backoff between conflict retries. It
	// doubles on each retry, up to one second, with jitter. Defaults to
	// DefaultConflictBackoff (10ms).
	ConflictBackoff time.Duration

	// ReplayHorizon is the longest window over which a message may be
	// delivered again: the broker retention you actually rewind over, the
	// SQS redrive horizon, the outbox replays you keep. Purge refuses to
	// delete rows younger than this, because a replay of their messages
	// would look new. Defaults to DefaultReplayHorizon (14 days).
	ReplayHorizon time.Duration

	// Retention is how long RunCleaner keeps inbox rows. It must not be
	// shorter than ReplayHorizon. Defaults to DefaultRetention (30 days).
	Retention time.Duration

	// PurgeBatchSize bounds each DELETE of Purge and RunCleaner, so that a
	// purge never holds many locks or a long transaction. Defaults to
	// DefaultPurgeBatchSize (10,000).
	PurgeBatchSize int

	// PurgeRest is how long Purge and RunCleaner rest after each batch, as
	// a multiple of the time the batch took, so that a purge of many rows
	// leaves the database to the consumers: at 3 a purge works at most a
	// quarter of the time. Negative does not rest. Defaults to
	// DefaultPurgeRest (3).
	PurgeRest float64

	// CleanerInterval is the time between RunCleaner's purges. Defaults to
	// DefaultCleanerInterval (1h).
	CleanerInterval time.Duration

	// Observer, if set, is told about every transaction and dead letter,
	// for metrics and tracing; when it is also an
	// inboxtransport.BreakerObserver, about the
	// pauses of transport adapters' consumers too. Defaults to nil, which
	// observes nothing.
	Observer Observer

	// Now returns the current time. It stamps the effects ledger's entries
	// and dead letters' last-seen times. It does not stamp processed_at nor
	// place the purge cutoff: those come from the database's clock, so
	// that a consumer host whose clock is wrong cannot make a purge delete
	// rows inside the replay horizon. Defaults to time.Now.
	Now func() time.Time
}

func (c *Config) withDefaults() Config {
	var out Config
	if c != nil {
		out = *c
	}
	if out.LockTimeout == 0 {
		out.LockTimeout = DefaultLockTimeout
	}
	if out.LockTimeout < 0 {
		out.LockTimeout = 0
	}
	if out.MaxConflictRetries == 0 {
		out.MaxConflictRetries = DefaultMaxConflictRetries
	}
	if out.MaxConflictRetries < 0 {
		out.MaxConflictRetries = 0
	}
	if out.ConflictBackoff == 0 {
		out.ConflictBackoff = DefaultConflictBackoff
	}
	if out.ReplayHorizon == 0 {
		out.ReplayHorizon = DefaultReplayHorizon
	}
	if out.Retention == 0 {
		out.Retention = max(DefaultRetention, out.ReplayHorizon)
	}
	if out.PurgeBatchSize == 0 {
		out.PurgeBatchSize = DefaultPurgeBatchSize
	}
	if out.PurgeRest == 0 {
		out.PurgeRest = DefaultPurgeRest
	}
	if out.PurgeRest < 0 {
		out.PurgeRest = 0
	}
	if out.CleanerInterval == 0 {
		out.CleanerInterval = DefaultCleanerInterval
	}
	if out.Now == nil {
		out.Now = time.Now
	}
	return out
}

func (c *Config) validate(tables inboxdriver.Tables) error {
	switch {
	case c.IDFormat > IDFormatText:
		return fmt.Errorf("inbox: Config.IDFormat: unknown format %v", c.IDFormat)
	case c.IDFormat == IDFormatText && tables.IDType == inboxdriver.IDTypeUUID,
		c.IDFormat == IDFormatULID && tables.IDType == inboxdriver.IDTypeUUID && tables.Layout != inboxdriver.LayoutPartitioned:
		return fmt.Errorf("inbox: Config.IDFormat is %v, but the store's message_id column is a uuid: migrate with a text id column and configure the store with IDType %q", c.IDFormat, inboxdriver.IDTypeText)
	case c.ConflictBackoff < 0:
		return fmt.Errorf("inbox: Config.ConflictBackoff must not be negative, got %v", c.ConflictBackoff)
	case c.ReplayHorizon < 0:
		return fmt.Errorf("inbox: Config.ReplayHorizon must not be negative, got %v", c.ReplayHorizon)
	case c.Retention < c.ReplayHorizon:
		return fmt.Errorf("inbox: Config.Retention (%v) is shorter than Config.ReplayHorizon (%v): %w", c.Retention, c.ReplayHorizon, ErrWindowTooShort)
	case c.PurgeBatchSize < 0:
		return fmt.Errorf("inbox: Config.PurgeBatchSize must be positive, got %d", c.PurgeBatchSize)
	case math.IsNaN(c.PurgeRest) || math.IsInf(c.PurgeRest, 0) || c.PurgeRest > 100:
		return fmt.Errorf("inbox: Config.PurgeRest must be a number up to 100, got %v", c.PurgeRest)
	case c.CleanerInterval < 0:
		return fmt.Errorf("inbox: Config.CleanerInterval must be positive, got %v", c.CleanerInterval)
	}
	return nil
}

// Client processes messages exactly once per consumer over a store. It is
// safe for concurrent use. TTx is the store's transaction type, which
// handlers receive. Client.Admin returns the operator's side of the same
// store.
type Client[TTx any] struct {
	admin  *Admin
	config Config
	logger *slog.Logger
	driver inboxdriver.Driver[TTx]
}

// NewClient returns a client over driver. config may be nil; its zero
// fields take their defaults.
func NewClient[TTx any](driver inboxdriver.Driver[TTx], config *Config) (*Client[TTx], error) {
	if driver == nil {
		return nil, errors.New("inbox: NewClient: driver is nil")
	}
	a, err := NewAdmin(driver, config)
	if err != nil {
		return nil, err
	}
	return &Client[TTx]{admin: a, config: a.config, logger: a.logger, driver: driver}, nil
}

// Admin returns the operator's side of the client's store: statistics,
// dead letters, the effects ledger, purges and partitions, under the
// client's Config.
func (c *Client[TTx]) Admin() *Admin { return c.admin }

// Config returns the client's configuration with defaults applied.
func (c *Client[TTx]) Config() Config { return c.config }

// Driver returns the client's driver.
func (c *Client[TTx]) Driver() inboxdriver.Driver[TTx] { return c.driver }

// handlerErr marks a handler's failure. It is not classified as the
// store's errors are: a handler's io.EOF or net.Error from its own work is
// the message's. It is the store's only when broken says the transaction's
// connection broke under it. Conflicts of its statements are marked, so
// that the transaction is retried.
func (c *Client[TTx]) handlerErr(err error, broken bool) error {
	switch {
	case broken:
		return marked(errConnLost, err)
	case c.driver.Classify(err) == inboxdriver.ClassConflict && !errors.Is(err, ErrConflict):
		return marked(ErrConflict, err)
	}
	return err
}

// rollback rolls tx back with a context that outlives a cancelled ctx, so
// that a cancellation never leaves a transaction open.
func (c *Client[TTx]) rollback(ctx context.Context, tx TTx) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := c.driver.Rollback(rctx, tx); err != nil {
		c.logger.WarnContext(ctx, "inbox: rollback failed", "err", err)
	}
}
