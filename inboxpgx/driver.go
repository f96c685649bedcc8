// Package inboxpgx is the inbox's Postgres store, over pgx v5 and its pool.
// It is the primary store: handlers receive a pgx.Tx.
//
// A claim travels with the BEGIN in one pipelined batch (pgx's
// Batch.BeginTx), so processing a message costs the same round trips as the
// bare BEGIN; UPDATE; COMMIT it protects: begin and claim, the handler's
// statements, commit.
//
// # Pipelined handlers
//
// A PipelineFunc (or PipelineBatchFunc) queues its statements on a
// pgx.Batch instead of running them, and Process (or ProcessBatch) then
// sends the whole transaction as one batch: BEGIN, the claim as a plain
// INSERT, the statements, COMMIT; one round trip for a new message. A
// duplicate fails the claim with a unique violation, the server skips the
// rest, and the driver rolls the aborted transaction back. pgx prepares a
// failed batch's statements again on their next use, and the server logs
// the violation, so after a duplicate the client looks messages up first
// (one SELECT) until one is new.
//
// # Concurrent duplicates
//
// A second delivery of a message whose first delivery is still in flight
// waits in its INSERT on the first transaction's uncommitted row: the unique
// key is the lock. When the first commits, the second finds the row and is a
// Duplicate; when the first rolls back, the second claims and applies. The
// wait is bounded by the client's LockTimeout, after which the claim fails
// with inbox.ErrLockTimeout.
//
// # Grants
//
// A consumer's role needs SELECT and INSERT on the inbox, and SELECT,
// INSERT and UPDATE of four columns on the dead letters; a cleaner's needs
// DELETE: docs/GRANTS.md lists each role's grants, and why.
//
// # Effects ledger
//
// The driver keeps the ledger of remote side effects (inbox.Client.Effect)
// in the effects table: it implements inboxdriver.EffectStore. Each ledger
// write commits on its own connection while the handler's transaction holds
// another, so a pool serving N concurrent handlers that use Effect needs
// more than N connections.
//
// # Outbox
//
// The driver keeps the producer's outbox (package outbox) in the tables
// Tables.Outbox and Tables.OutboxKeys: it implements
// inboxdriver.OutboxStore. An enqueue is one INSERT over unnest, whatever
// the number of events; a relay's claim sends the ordered and the
// unordered claims in one round trip, each an UPDATE over rows locked with
// FOR UPDATE SKIP LOCKED.
package inboxpgx

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/internal/pgpartition"
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
}

// Driver is the inbox store on a pgx pool. It is safe for concurrent use.
type Driver struct {
	pool      *pgxpool.Pool
	tables    inboxdriver.Tables
	txOptions pgx.TxOptions
	begin     string // BEGIN with txOptions
	q         queries
	// partitions keeps the inbox's partitions, when it is partitioned.
	partitions *pgpartition.Maintainer
	oq         outboxQueries
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
	d := &Driver{pool: pool, tables: t, txOptions: cfg.TxOptions, begin: beginSQL(cfg.TxOptions), q: newQueries(t), oq: newOutboxQueries(t)}
	d.partitions = pgpartition.New(partitionDB{d}, t, cfg.Partitions)
	return d, nil
}

// Pool returns the driver's pool.
func (d *Driver) Pool() *pgxpool.Pool { return d.pool }

// Dialect implements inboxdriver.Admin.
func (d *Driver) Dialect() inboxdriver.Dialect { return inboxdriver.DialectPostgres }

// Tables implements inboxdriver.Admin.
func (d *Driver) Tables() inboxdriver.Tables { return d.tables }

// BeginClaim implements inboxdriver.Driver. BEGIN, the lock timeout and the
// claim go to the server in one pipelined batch.
func (d *Driver) BeginClaim(ctx context.Context, p *inboxdriver.ClaimParams) (pgx.Tx, bool, error) {
	b := &pgx.Batch{}
	b.BeginTx(d.txOptions)
	var claimed bool
	d.queueClaim(b, p.LockTimeout, func(b *pgx.Batch, opts ...any) {
		b.Queue(d.q.claim, append(opts, p.Consumer, p.ID)...).Exec(func(ct pgconn.CommandTag) error {
			claimed = ct.RowsAffected() == 1
			return nil
		})
	})
	tx, err := d.sendBegin(ctx, b)
	if err != nil {
		return nil, false, d.claimError(ctx, []string{p.ID}, err)
	}
	return tx, claimed, nil
}

// BeginClaimBatch implements inboxdriver.Driver. One INSERT … SELECT FROM
// unnest claims every id.
func (d *Driver) BeginClaimBatch(ctx context.Context, p *inboxdriver.ClaimBatchParams) (pgx.Tx, []bool, error) {
	b := &pgx.Batch{}
	b.BeginTx(d.txOptions)
	claimed := make([]bool, len(p.IDs))
	d.queueClaim(b, p.LockTimeout, func(b *pgx.Batch, opts ...any) {
		b.Queue(d.q.claimBatch, append(opts, p.Consumer, p.IDs)...).Query(func(rows pgx.Rows) error {
			return scanClaimed(rows, p.IDs, claimed)
		})
	})
	tx, err := d.sendBegin(ctx, b)
	if err != nil {
		return nil, nil, d.claimError(ctx, p.IDs, err)
	}
	return tx, claimed, nil
}

// Claim implements inboxdriver.Driver, inside the caller's transaction.
func (d *Driver) Claim(ctx context.Context, tx pgx.Tx, p *inboxdriver.ClaimParams) (bool, error) {
	if p.LockTimeout <= 0 {
		ct, err := tx.Exec(ctx, d.q.claim, p.Consumer, p.ID)
		if err != nil {
			return false, d.claimError(ctx, []string{p.ID}, err)
		}
		return ct.RowsAffected() == 1, nil
	}
	b := &pgx.Batch{}
	var claimed bool
	d.queueClaim(b, p.LockTimeout, func(b *pgx.Batch, opts ...any) {
		b.Queue(d.q.claim, append(opts, p.Consumer, p.ID)...).Exec(func(ct pgconn.CommandTag) error {
			claimed = ct.RowsAffected() == 1
			return nil
		})
	})
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return false, d.claimError(ctx, []string{p.ID}, err)
	}
	return claimed, nil
}

// queueClaim queues the claim, bracketed by statements that bound its lock
// wait and then restore the transaction's own lock_timeout, so that the
// bound applies to the claim and not to the handler. claim queues the claim
// with opts before its arguments: a boundedPrepare, which bounds the
// claim's first prepare on a connection too. It returns the restore, or nil
// when there is no bracket.
func (d *Driver) queueClaim(b *pgx.Batch, lockTimeout time.Duration, claim func(b *pgx.Batch, opts ...any)) (restore *pgx.QueuedQuery) {
	if lockTimeout <= 0 {
		claim(b)
		return nil
	}
	ms := max(lockTimeout.Milliseconds(), 1)
	b.Queue(setLockTimeout, fmt.Sprintf("%dms", ms))
	claim(b, boundedPrepare{timeout: lockTimeout})
	return b.Queue(restoreLockTimeout)
}

// The lock-timeout bracket. The saved value lives in a transaction-local
// custom setting, so the restore is exact even inside a caller's
// transaction that set its own lock_timeout. The save is nested in the
// set's argument, so that it comes first whatever the order in which the
// server evaluates a target list.
//
// Folding the bracket into the claim statement (a CTE that sets, claims and
// restores) was measured and was not cheaper: see docs/BENCHMARKS.md.
const (
	setLockTimeout = `SELECT set_config('lock_timeout',
    $1::text || left(set_config('inbox.saved_lock_timeout', current_setting('lock_timeout'), true), 0), true)`
	restoreLockTimeout = `SELECT set_config('lock_timeout', current_setting('inbox.saved_lock_timeout'), true)`
)

// sendBegin sends a batch that begins a transaction and returns the
// transaction, or rolls it back and returns the batch's error.
func (d *Driver) sendBegin(ctx context.Context, b *pgx.Batch) (pgx.Tx, error) {
	br := d.pool.SendBatch(ctx, b)
	tx := br.Tx()
	if err := br.Close(); err != nil {
		rollback(ctx, tx)
		return nil, err
	}
	return tx, nil
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

// Commit implements inboxdriver.Driver.
func (d *Driver) Commit(ctx context.Context, tx pgx.Tx) error {
	return tx.Commit(ctx)
}

// Rollback implements inboxdriver.Driver.
func (d *Driver) Rollback(ctx context.Context, tx pgx.Tx) error {
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

// lockID hashes a lock name to an advisory lock key.
func lockID(name string) int64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return int64(h.Sum64())
}
