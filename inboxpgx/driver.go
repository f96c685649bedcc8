// Package inboxpgx is the inbox's Postgres store, over pgx v5 and its pool.
// Handlers receive a pgx.Tx. A claim travels with the BEGIN in one round
// trip, and a PipelineFunc handler's whole transaction in one.
//
//	pool, _ := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
//	driver, _ := inboxpgx.New(pool, nil)
//	client, _ := inbox.NewClient(driver, nil)
//
// The tables come from package inboxmigrate; docs/GRANTS.md lists the
// grants of each role.
package inboxpgx

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/internal/pglock"
	"github.com/txinbox/inbox/internal/pgpartition"
	"github.com/txinbox/inbox/internal/uuid"
)

// Config configures a Driver. The zero value is valid.
type Config struct {
	// Tables names the tables and their schema, and the type of the id
	// column. Defaults to the default names in the connection's search_path
	// with uuid ids.
	Tables inboxdriver.Tables

	// TxOptions are the options of the transactions the driver begins for
	// Process and ProcessBatch. Defaults to the server's default isolation
	// level (read committed). Under serializable isolation, serialization
	// failures are retried by the client.
	TxOptions pgx.TxOptions

	// Partitions are the settings of an inbox in the partitioned layout
	// (Tables.Layout inboxdriver.LayoutPartitioned); other layouts ignore
	// them. Defaults to those of inboxdriver.PartitionConfig.
	Partitions inboxdriver.PartitionConfig

	// LockIdleTimeout bounds how long the store-wide locks (the cleaner's,
	// the partition maintainer's, the migrator's) stay held by a holder
	// that froze or lost its network: the lock's transaction ends that
	// long after the holder's last keepalive, which it sends every third
	// of it. A holder that exits releases its locks at once. Defaults to
	// DefaultLockIdleTimeout.
	LockIdleTimeout time.Duration

	// CommitTimeout bounds the wait for the reply to the COMMIT of a
	// transaction the driver began. A primary whose
	// synchronous_standby_names is set holds each commit until a
	// synchronous standby confirms it, and without one holds it for ever.
	// Past the bound Commit returns an error wrapping ErrCommitTimeout: the
	// outcome is unknown, and the message is neither acked nor
	// dead-lettered. The driver never cancels the COMMIT (a cancel request
	// would make it visible on the primary alone, unreplicated), nor
	// closes its connection (pgx then sends one): it leaves the COMMIT to
	// finish on its connection, which leaves the pool and closes once the
	// server answers. The redelivery's claim waits on the commit's lock
	// until the standby returns (it is then a Duplicate) or the primary
	// fails over (it is then applied on the new one). A caller's context
	// that ends during the commit abandons it the same way. Set it above
	// the longest commit a healthy cluster takes. Negative waits without
	// limit. Defaults to DefaultCommitTimeout.
	CommitTimeout time.Duration
}

// DefaultLockIdleTimeout is the default Config.LockIdleTimeout.
const DefaultLockIdleTimeout = pglock.IdleTimeout

// Driver is the inbox store on a pgx pool. It is safe for concurrent use.
//
// It keeps the ledger of remote side effects (inbox.Client.Effect) in the
// effects table: each ledger write commits on its own connection while the
// handler's transaction holds another, so a pool serving N concurrent
// handlers that use Effect needs more than N connections. It keeps the
// producer's outbox (package outbox) in Tables.Outbox and
// Tables.OutboxKeys: an enqueue is one INSERT over unnest, and a relay's
// claim sends the ordered and the unordered claims in one round trip, each
// an UPDATE over rows locked with FOR UPDATE SKIP LOCKED.
type Driver struct {
	pool      *pgxpool.Pool
	tables    inboxdriver.Tables
	txOptions pgx.TxOptions
	begin     string // BEGIN with txOptions
	q         queries
	// partitions keeps the inbox's partitions, when it is partitioned.
	partitions *pgpartition.Maintainer
	oq         outboxQueries
	// keys is where the next ordered claim's walk of the keys resumes.
	keys inboxdriver.OutboxKeyCursor
	// duplicates holds the consumers whose last claim for a Pipelined
	// handler found a duplicate (see beginPipelined).
	duplicates sync.Map
	// lockIdle is Config.LockIdleTimeout.
	lockIdle time.Duration
	// commitTimeout is Config.CommitTimeout, with its default.
	commitTimeout time.Duration
}

var _ inboxdriver.Driver[pgx.Tx] = (*Driver)(nil)

// New returns a driver over pool. config may be nil.
func New(pool *pgxpool.Pool, config *Config) (*Driver, error) {
	if pool == nil {
		return nil, errors.New("inboxpgx: pool is nil")
	}
	var cfg Config
	if config != nil {
		cfg = *config
	}
	t := cfg.Tables.WithDefaults()
	if err := t.Validate(inboxdriver.DialectPostgres); err != nil {
		return nil, err
	}
	if err := cfg.Partitions.Validate(); err != nil {
		return nil, err
	}
	if cfg.LockIdleTimeout < 0 {
		return nil, fmt.Errorf("inboxpgx: Config.LockIdleTimeout is negative (%s)", cfg.LockIdleTimeout)
	}
	if cfg.CommitTimeout == 0 {
		cfg.CommitTimeout = DefaultCommitTimeout
	}
	d := &Driver{pool: pool, tables: t, txOptions: cfg.TxOptions, begin: beginSQL(cfg.TxOptions), q: newQueries(t), oq: newOutboxQueries(t),
		lockIdle: cfg.LockIdleTimeout, commitTimeout: cfg.CommitTimeout}
	d.partitions = pgpartition.New(partitionDB{d}, t, cfg.Partitions)
	return d, nil
}

// Pool returns the driver's pool.
func (d *Driver) Pool() *pgxpool.Pool { return d.pool }

// Dialect implements inboxdriver.Admin.
func (d *Driver) Dialect() inboxdriver.Dialect { return inboxdriver.DialectPostgres }

// Tables implements inboxdriver.Admin.
func (d *Driver) Tables() inboxdriver.Tables { return d.tables }

// BeginClaim implements inboxdriver.Driver. BEGIN and the claim go to the
// server in one pipelined batch (pgx's Batch.BeginTx): one INSERT, of one
// row or FROM unnest. Processing a message then costs the round trips of
// the bare BEGIN; UPDATE; COMMIT it protects. A Pipelined handler's claim
// is deferred to Commit (see PipelineFunc).
//
// A second delivery of a message whose first delivery is still in flight
// waits in its INSERT on the first transaction's uncommitted row: the
// unique key is the lock. When the first commits, the second finds the row
// and is a Duplicate; when the first rolls back, the second claims and
// applies. ClaimParams.LockTimeout bounds the wait.
func (d *Driver) BeginClaim(ctx context.Context, p *inboxdriver.ClaimParams) (pgx.Tx, []bool, error) {
	if p.Pipelined {
		if tx, claimed, ok, err := d.beginPipelined(ctx, p); ok || err != nil {
			return tx, claimed, err
		}
	}
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		return nil, nil, d.claimError(ctx, p.IDs, err)
	}
	bracket, err := d.bracket(ctx, conn.Conn(), p.LockTimeout)
	if err != nil {
		conn.Release()
		return nil, nil, d.claimError(ctx, p.IDs, err)
	}
	// One id is claimed with a plain INSERT, cheaper for the server than
	// ON CONFLICT's speculative insertion: a duplicate fails it, and the
	// aborted transaction is rolled back. The server logs that failure and
	// pgx prepares the batch's statements again, so after a duplicate the
	// consumer's claims take ON CONFLICT DO NOTHING until one is new
	// (noteDuplicates).
	_, after := d.duplicates.Load(p.Consumer)
	plain := len(p.IDs) == 1 && !after
	b := &pgx.Batch{}
	b.BeginTx(d.txOptions)
	claimed := make([]bool, len(p.IDs))
	bracket.queue(b, func(b *pgx.Batch, opts ...any) *pgx.QueuedQuery {
		switch {
		case plain:
			q := b.Queue(d.q.claimPlain, append(opts, p.Consumer, d.idArg(p.IDs[0]))...)
			q.Exec(func(pgconn.CommandTag) error {
				claimed[0] = true
				return nil
			})
			return q
		case len(p.IDs) == 1:
			q := b.Queue(d.q.claim, append(opts, p.Consumer, d.idArg(p.IDs[0]))...)
			q.Exec(func(ct pgconn.CommandTag) error {
				claimed[0] = ct.RowsAffected() == 1
				return nil
			})
			return q
		}
		q := b.Queue(d.q.claimBatch, append(opts, p.Consumer, d.idsArg(p.IDs))...)
		q.Query(func(rows pgx.Rows) error { return scanClaimed(rows, p.IDs, claimed) })
		return q
	})
	br := conn.SendBatch(ctx, b)
	tx := &poolTx{Tx: br.Tx(), conn: conn, commitTimeout: d.commitTimeout}
	if err := br.Close(); err != nil {
		rollback(ctx, tx)
		if plain && isUniqueViolation(err) {
			// A duplicate: the transaction is over, and Rollback of it is
			// a no-op.
			d.noteDuplicates(p.Consumer, claimed)
			return tx, claimed, nil
		}
		return nil, nil, d.claimError(ctx, p.IDs, err)
	}
	d.noteDuplicates(p.Consumer, claimed)
	return tx, claimed, nil
}

// Claim implements inboxdriver.Driver, inside the caller's transaction,
// whose lock_timeout the driver cannot know: a bracket saves and restores
// it around the claim.
func (d *Driver) Claim(ctx context.Context, tx pgx.Tx, p *inboxdriver.ClaimParams) ([]bool, error) {
	b := &pgx.Batch{}
	claimed := make([]bool, len(p.IDs))
	claim := func(b *pgx.Batch, opts ...any) {
		b.Queue(d.q.claimBatch, append(opts, p.Consumer, d.idsArg(p.IDs))...).Query(func(rows pgx.Rows) error {
			return scanClaimed(rows, p.IDs, claimed)
		})
	}
	if p.LockTimeout <= 0 {
		claim(b)
	} else {
		ms := max(p.LockTimeout.Milliseconds(), 1)
		b.Queue(setLockTimeout, fmt.Sprintf("%dms", ms))
		claim(b, boundedPrepare{timeout: p.LockTimeout})
		b.Queue(restoreLockTimeout)
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, d.claimError(ctx, p.IDs, err)
	}
	return claimed, nil
}

// The lock-timeout bracket of Claim, inside a caller's transaction. The
// saved value lives in a transaction-local custom setting, so the restore
// is exact even when the caller set its own lock_timeout. The save is
// nested in the set's argument, so that it comes first whatever the order
// in which the server evaluates a target list.
const (
	setLockTimeout = `SELECT set_config('lock_timeout',
    $1::text || left(set_config('inbox.saved_lock_timeout', current_setting('lock_timeout'), true), 0), true)`
	restoreLockTimeout = `SELECT set_config('lock_timeout', current_setting('inbox.saved_lock_timeout'), true)`
)

// poolTx is a transaction on a connection acquired from the pool, which
// goes back to the pool when the transaction ends. Its Commit (commit.go)
// is bounded by commitTimeout.
type poolTx struct {
	pgx.Tx
	conn          *pgxpool.Conn
	commitTimeout time.Duration
	// abandoned says that Commit stopped waiting for the COMMIT, which
	// goes on on the connection, no longer the transaction's.
	abandoned bool
}

func (t *poolTx) Rollback(ctx context.Context) error {
	if t.abandoned {
		return pgx.ErrTxClosed
	}
	err := t.Tx.Rollback(ctx)
	t.release()
	return err
}

// ended reports whether the transaction ended, and its connection went
// back to the pool: tx.Conn() is then another caller's, not to be touched.
func (t *poolTx) ended() bool { return t.conn == nil }

func (t *poolTx) release() {
	if t.conn != nil {
		t.conn.Release()
		t.conn = nil
	}
}

func scanClaimed(rows pgx.Rows, ids []string, claimed []bool) error {
	at := make(map[string]int, len(ids))
	for i, id := range ids {
		at[id] = i
	}
	var id string
	for rows.Next() {
		if err := rows.Scan(&id); err != nil {
			return err
		}
		i, ok := at[id]
		if !ok {
			return fmt.Errorf("inboxpgx: claim returned id %q that was not asked for", id)
		}
		claimed[i] = true
	}
	return rows.Err()
}

// Commit implements inboxdriver.Driver. A deferred claim's transaction is
// sent whole here (see pipeTx). It waits Config.CommitTimeout at most for
// the server's reply, and then returns ErrCommitTimeout (see awaitCommit).
func (d *Driver) Commit(ctx context.Context, tx pgx.Tx) error {
	if t, ok := tx.(*pipeTx); ok {
		return t.commit(ctx)
	}
	return tx.Commit(ctx)
}

// Rollback implements inboxdriver.Driver.
func (d *Driver) Rollback(ctx context.Context, tx pgx.Tx) error {
	if t, ok := tx.(*pipeTx); ok {
		t.done = true // nothing was sent
		return nil
	}
	err := tx.Rollback(ctx)
	if errors.Is(err, pgx.ErrTxClosed) {
		return nil
	}
	return err
}

func rollback(ctx context.Context, tx pgx.Tx) {
	if tx == nil {
		return
	}
	rctx, cancel := cleanupContext(ctx)
	defer cancel()
	_ = tx.Rollback(rctx)
}

// cleanupContext is the context of a rollback after ctx failed: it
// outlives a cancelled ctx, for a bounded time.
func cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
}

// idArg is a message id as a statement's argument. A uuid column's id goes
// as a pgtype.UUID: in the modes that describe the statement pgx sends its
// 16 bytes in binary, which the server copies; in QueryExecModeExec and the
// simple protocol, where pgx knows no parameter type, it encodes it as
// text, which it could not do for a bare [16]byte.
func (d *Driver) idArg(id string) any {
	if d.tables.IDType == inboxdriver.IDTypeUUID {
		if b, ok := uuid.Parse(id); ok {
			return pgtype.UUID{Bytes: b, Valid: true}
		}
	}
	return id
}

// idsArg is ids as one array argument, as idArg has them. It matters more
// than for one id: pgx has no binary form of a []string for uuid[], and
// before it falls back to text it formats an error that quotes every id.
func (d *Driver) idsArg(ids []string) any {
	if d.tables.IDType != inboxdriver.IDTypeUUID {
		return ids
	}
	out := make([]pgtype.UUID, len(ids))
	for i, id := range ids {
		b, ok := uuid.Parse(id)
		if !ok {
			return ids // not canonical: the server says what is wrong with it
		}
		out[i] = pgtype.UUID{Bytes: b, Valid: true}
	}
	return out
}
