// Package inboxdriver is the seam between an [inbox.Client] and a store.
//
// It is internal in spirit: applications use the root package inbox and a
// store package (inboxpgx, inboxsql). The interface may grow between minor
// versions as the client needs more of its stores; implementations in other
// modules should expect to follow it. Every store must pass the conformance
// suite in package inboxtest.
//
// The client validates consumer names and message ids, and canonicalises the
// ids, before it calls a driver. A driver may therefore assume well-formed
// parameters, and must still pass every value as a bind parameter, never
// spliced into SQL.
//
// [inbox.Client]: https://pkg.go.dev/github.com/txinbox/inbox#Client
package inboxdriver

import (
	"context"
	"errors"
	"time"

	"github.com/txinbox/inbox/inboxtype"
)

// ErrNotFound is returned by lookups of a row that does not exist. The root
// package re-exports it as inbox.ErrNotFound.
var ErrNotFound = errors.New("not found")

// Driver is what a store provides to the client. TTx is the store's own
// transaction type (pgx.Tx, *sql.Tx), which handlers receive unchanged.
type Driver[TTx any] interface {
	Admin

	// BeginClaim begins a transaction and claims p.IDs for p.Consumer as
	// its first statement, with INSERT … ON CONFLICT DO NOTHING or the
	// dialect's equivalent; a store should send the claim with the begin
	// where its protocol allows it. claimed[i] reports whether p.IDs[i]
	// was new. The caller owns the open transaction: it must commit or roll
	// it back. On error the driver has already released it.
	//
	// With p.Pipelined, a store may defer the claim to the commit: it then
	// returns claimed as nil, every id counting as new, and Commit sends
	// the claim, the statements the handler queued and COMMIT together. If
	// the claim finds a duplicate there, nothing runs and Commit returns
	// ErrDuplicate; if the queued statements fail, a *WorkError.
	BeginClaim(ctx context.Context, p *ClaimParams) (tx TTx, claimed []bool, err error)

	// Claim claims p.IDs inside a transaction that the caller began.
	Claim(ctx context.Context, tx TTx, p *ClaimParams) (claimed []bool, err error)

	// Commit commits tx.
	Commit(ctx context.Context, tx TTx) error

	// Rollback rolls tx back. Rolling back a transaction that is already
	// closed is not an error.
	Rollback(ctx context.Context, tx TTx) error

	// TxBroken reports whether tx's connection broke, or the store says
	// err means it cannot serve any transaction now (a server shutting
	// down, a connection lost), after a handler failed with err on tx. The
	// client then judges the failure the store's, not the message's. A
	// handler's own errors that only look like a lost connection (io.EOF
	// from decoding its payload, a net.Error from another service) must
	// not make it true while tx's connection is sound. The handler may
	// have ended tx itself (rolled it back, then failed): its connection
	// may then belong to another caller, and must not be touched.
	TxBroken(ctx context.Context, tx TTx, err error) bool
}

// Pipelined is implemented by a handler whose Handle (and HandleBatch)
// only queue statements on the transaction, for the store to send later,
// such as inboxpgx.PipelineFunc. The client may call such a handler
// before the claim's outcome is known (ClaimParams.Pipelined).
type Pipelined interface {
	// PipelinesOnly is a marker: it does nothing.
	PipelinesOnly()
}

// ErrDuplicate is returned by Commit of a deferred claim (see
// Driver.BeginClaim) that found an id already claimed: nothing was
// committed. The client runs the transaction again, claim first.
var ErrDuplicate = errors.New("a deferred claim found a duplicate")

// WorkError is returned by Commit of a deferred claim (see
// Driver.BeginClaim) when the statements the handler queued failed: the
// claim was new, and nothing was committed. It is the handler's failure.
type WorkError struct{ Err error }

func (e *WorkError) Error() string { return e.Err.Error() }

// Unwrap returns the statements' error.
func (e *WorkError) Unwrap() error { return e.Err }

// Admin is the part of a driver that works outside a message's transaction:
// maintenance, dead letters, statistics and migrations. The CLI and
// inboxmigrate need only this part, so it is not generic.
type Admin interface {
	// Dialect names the SQL dialect the store speaks.
	Dialect() Dialect

	// Tables returns the table names the store was configured with, with
	// defaults applied.
	Tables() Tables

	// Classify tells the client how to treat err, which came from the store
	// or from a handler's SQL on the store's transaction.
	Classify(err error) ErrorClass

	// PurgeBatch deletes at most p.Limit inbox rows processed more than
	// p.OlderThan ago by the database's clock, and the effect rows of the same messages, without waiting
	// for rows that are locked. It returns the number of inbox rows deleted.
	PurgeBatch(ctx context.Context, p *PurgeParams) (int64, error)

	// PurgeCount counts the inbox rows that PurgeBatch would delete, for a
	// dry run.
	PurgeCount(ctx context.Context, p *PurgeParams) (int64, error)

	// Forget deletes the inbox row of one message, so that its next
	// delivery applies again, and the message's effect-ledger entries, if
	// the store keeps the ledger (EffectStore). It reports whether any row
	// was deleted.
	Forget(ctx context.Context, p *ForgetParams) (bool, error)

	// ForgetCount counts the rows that Forget would delete, for a dry run:
	// the message's inbox row and its effect-ledger entries.
	ForgetCount(ctx context.Context, p *ForgetParams) (inboxtype.ForgetCounts, error)

	// inboxtype.Stats reports the inbox's size.
	Stats(ctx context.Context) (*inboxtype.Stats, error)

	// WithLock runs fn while holding the store-wide lock named key, if no one
	// else holds it. ran is false, and fn is not called, when the lock is
	// taken. It is how a single cleaner is chosen among many processes.
	WithLock(ctx context.Context, key string, fn func(ctx context.Context) error) (ran bool, err error)

	// inboxtype.DeadLetter records a message that will not be applied. A message
	// already recorded under the same consumer and DedupKey is updated:
	// its reason, error, attempts and last-seen time.
	DeadLetter(ctx context.Context, d *inboxtype.DeadLetter) error

	// DeadLetterList lists dead letters, newest first.
	DeadLetterList(ctx context.Context, p *inboxtype.DeadLetterListParams) ([]*inboxtype.DeadLetter, error)

	// DeadLetterGet returns one dead letter, or ErrNotFound.
	DeadLetterGet(ctx context.Context, id int64) (*inboxtype.DeadLetter, error)

	// DeadLetterDelete deletes one dead letter and reports whether it
	// existed.
	DeadLetterDelete(ctx context.Context, id int64) (bool, error)

	// Takeover records, in its own short transaction, that p.Consumer took
	// over p.Source and that the message at p.Position comes first. It
	// returns how many takeovers in a row have found that same position
	// first with its message started (TakeoverStart) and never got past
	// it, plus one for this takeover (1 when the recorded position differs
	// or there was none), and whether a record existed before: a record
	// that TakeoverDone did not clear means the owner before died. The
	// record is left not started.
	Takeover(ctx context.Context, p *TakeoverParams) (n int, existed bool, err error)

	// TakeoverStart records that the owner of p.Source is about to run
	// the message at p.Position: a crash from now on counts against it. A
	// record at another position moves to p.Position with a count of 1.
	TakeoverStart(ctx context.Context, p *TakeoverParams) error

	// TakeoverDone clears the record of p.Source if its position is still
	// p.Position: the owner got past it, or stopped cleanly.
	TakeoverDone(ctx context.Context, p *TakeoverParams) error

	// WithMigrationLock runs fn while holding a lock that excludes every
	// other migrator of the same tables. It waits for the lock.
	WithMigrationLock(ctx context.Context, fn func(ctx context.Context) error) error

	// MigrationTx runs fn in one transaction and commits it if fn returns
	// nil. Statements use the dialect's placeholders.
	MigrationTx(ctx context.Context, fn func(ctx context.Context, q Querier) error) error
}

// Querier runs statements inside a [Admin.MigrationTx].
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) error
	// QueryInts runs a query whose rows hold one integer column.
	QueryInts(ctx context.Context, sql string, args ...any) ([]int64, error)
}

// Dialect names an SQL dialect.
type Dialect string

// The dialects of the stores in this module.
const (
	DialectPostgres Dialect = "postgres"
	DialectSQLite   Dialect = "sqlite"
	DialectMySQL    Dialect = "mysql"
)

// IDType is the type of the message_id column.
type IDType string

const (
	// IDTypeUUID stores ids in a uuid column (or the dialect's closest
	// equivalent). It is the default.
	IDTypeUUID IDType = "uuid"
	// IDTypeText stores ids as text of at most MaxTextIDLen bytes, for
	// producers whose event ids are ULIDs or opaque strings.
	IDTypeText IDType = "text"
)

// MaxTextIDLen is the longest id, in bytes, that a text id column holds.
const MaxTextIDLen = 255

// Tables names the store's tables. Every name is quoted wherever it is used.
type Tables struct {
	// Schema is the Postgres schema, or the MySQL database, that holds the
	// tables. Empty means the connection's default (search_path on Postgres).
	// SQLite has no schemas.
	Schema string
	// Inbox is the done set. Defaults to "inbox".
	Inbox string
	// DeadLetters holds messages that will not be applied. Defaults to
	// "inbox_dead_letters".
	DeadLetters string
	// Effects is the ledger of remote side effects. Defaults to
	// "inbox_effects".
	Effects string
	// Migrations records applied migrations. Defaults to "inbox_migrations".
	Migrations string
	// Takeovers counts, per consumer and source (a Kafka partition), the
	// takeovers that found the same message first: a message that crashes
	// its consumer every time. Defaults to "inbox_takeovers".
	Takeovers string
	// Outbox holds the producer's events until a relay has published
	// them (package outbox). Defaults to "outbox".
	Outbox string
	// OutboxKeys holds the last sequence number of each message key, for
	// the outbox's ordered mode. Defaults to "outbox_keys".
	OutboxKeys string
	// IDType is the type of the message_id column. Defaults to IDTypeUUID.
	IDType IDType
	// Layout is the inbox table's layout: LayoutPartitioned partitions it
	// by day over time-ordered ids, on Postgres. Configure the store with
	// the layout its tables were migrated with. Defaults to LayoutPlain.
	Layout Layout
}

// Default table names.
const (
	DefaultInboxTable       = "inbox"
	DefaultDeadLettersTable = "inbox_dead_letters"
	DefaultEffectsTable     = "inbox_effects"
	DefaultMigrationsTable  = "inbox_migrations"
	DefaultTakeoversTable   = "inbox_takeovers"
	DefaultOutboxTable      = "outbox"
	DefaultOutboxKeysTable  = "outbox_keys"
)

// WithDefaults returns t with empty fields set to their defaults.
func (t Tables) WithDefaults() Tables {
	if t.Inbox == "" {
		t.Inbox = DefaultInboxTable
	}
	if t.DeadLetters == "" {
		t.DeadLetters = DefaultDeadLettersTable
	}
	if t.Effects == "" {
		t.Effects = DefaultEffectsTable
	}
	if t.Migrations == "" {
		t.Migrations = DefaultMigrationsTable
	}
	if t.Takeovers == "" {
		t.Takeovers = DefaultTakeoversTable
	}
	if t.Outbox == "" {
		t.Outbox = DefaultOutboxTable
	}
	if t.OutboxKeys == "" {
		t.OutboxKeys = DefaultOutboxKeysTable
	}
	if t.IDType == "" {
		t.IDType = IDTypeUUID
	}
	if t.Layout == "" {
		t.Layout = LayoutPlain
	}
	return t
}

// ErrorClass is how the client treats an error.
type ErrorClass int

const (
	// ClassOther is any error not listed below. A handler's own errors are
	// in this class.
	ClassOther ErrorClass = iota
	// ClassConflict is a serialization failure or deadlock (Postgres
	// 40001/40P01, SQLite BUSY, MySQL 1213). The whole transaction is
	// retried.
	ClassConflict
	// ClassLockTimeout is a claim that waited longer than the configured
	// lock timeout behind an in-flight delivery of the same message.
	ClassLockTimeout
	// ClassUnavailable is a store that cannot be reached, or a connection
	// that broke, whatever error code it carries: a refused connection is
	// unavailability even when the server gave a reason (no such
	// database, no CONNECT privilege). It is never a reason to
	// dead-letter.
	ClassUnavailable
	// ClassDenied is a statement the store refused for want of a
	// privilege (Postgres 42501, MySQL 1142). A cleaner without DELETE
	// stops on it rather than retry.
	ClassDenied
	// ClassNotMigrated is a statement on a table or column that does not
	// exist (Postgres 42P01, 42703, 3F000; MySQL 1146, 1054; SQLite "no
	// such table", "no such column"): the store's tables are missing or not
	// migrated to the latest version. The root package reports it as
	// inbox.ErrNotMigrated, which the inbox command turns into its hint
	// to run 'inbox migrate up'.
	ClassNotMigrated
)

// ClaimParams are the parameters of a claim. The claim stamps
// processed_at with the database's clock (now(), CURRENT_TIMESTAMP), never
// a consumer host's: the purge cutoff is read from the same clock.
type ClaimParams struct {
	Consumer string
	// IDs are canonical and distinct; most claims hold one.
	IDs []string
	// LockTimeout bounds the wait behind an uncommitted claim of the same
	// id by another transaction. Zero means no bound.
	LockTimeout time.Duration
	// Pipelined says that the handler implements Pipelined: the store may
	// defer the claim to the commit (see Driver.BeginClaim).
	Pipelined bool
}

// PurgeParams select the rows a purge deletes.
type PurgeParams struct {
	// OlderThan deletes rows processed more than this long ago, by the
	// database's clock: the cutoff is the database's now() minus OlderThan,
	// so that a consumer host whose clock is wrong cannot move it.
	OlderThan time.Duration
	// Consumer limits the purge to one consumer when not empty.
	Consumer string
	// Limit bounds one batch.
	Limit int
}

// ForgetParams name one inbox row.
type ForgetParams struct {
	Consumer string
	ID       string
}

// TakeoverParams name a source of messages that one consumer owns at a
// time, such as a Kafka partition, and a position in it.
type TakeoverParams struct {
	Consumer string
	// Source names the source, such as "kafka:orders/3".
	Source string
	// Position is the message's position in the source, such as its
	// offset.
	Position int64
}
