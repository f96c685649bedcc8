// Package inboxpgx is the inbox's Postgres store, over pgx v5 and its pool.
// It is the primary store: handlers receive a pgx.Tx.
//
// A claim travels with the BEGIN in one pipelined batch (pgx's
// Batch.BeginTx), so processing a message costs the same round trips as the
// bare BEGIN; UPDATE; COMMIT it protects: begin and claim, the handler's
// statements, commit. The claim is one statement, its lock timeout
// included.
//
// # Concurrent duplicates
//
// A second delivery of a message whose first delivery is still in flight
// waits in its INSERT on the first transaction's uncommitted row: the unique
// key is the lock. When the first commits, the second finds the row and is a
// Duplicate; when the first rolls back, the second claims and applies. The
// wait is bounded by the client's LockTimeout, after which the claim fails
// with inbox.ErrLockTimeout.
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
}

// Driver is the inbox store on a pgx pool. It is safe for concurrent use.
type Driver struct {
	pool      *pgxpool.Pool
	tables    inboxdriver.Tables
	txOptions pgx.TxOptions
	q         queries
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
	return &Driver{pool: pool, tables: t, txOptions: cfg.TxOptions, q: newQueries(t)}, nil
}

// Pool returns the driver's pool.
func (d *Driver) Pool() *pgxpool.Pool { return d.pool }

// Dialect implements inboxdriver.Admin.
func (d *Driver) Dialect() inboxdriver.Dialect { return inboxdriver.DialectPostgres }

// Tables implements inboxdriver.Admin.
func (d *Driver) Tables() inboxdriver.Tables { return d.tables }

// BeginClaim implements inboxdriver.Driver. BEGIN and the claim, with its
// lock timeout, go to the server in one pipelined batch of two statements.
func (d *Driver) BeginClaim(ctx context.Context, p *inboxdriver.ClaimParams) (pgx.Tx, bool, error) {
	b := &pgx.Batch{}
	b.BeginTx(d.txOptions)
	claimed := d.queueClaim(b, p)
	tx, err := d.sendBegin(ctx, b)
	if err != nil {
		return nil, false, err
	}
	return tx, *claimed, nil
}

// BeginClaimBatch implements inboxdriver.Driver. One INSERT … SELECT FROM
// unnest claims every id.
func (d *Driver) BeginClaimBatch(ctx context.Context, p *inboxdriver.ClaimBatchParams) (pgx.Tx, []bool, error) {
	b := &pgx.Batch{}
	b.BeginTx(d.txOptions)
	claimed := make([]bool, len(p.IDs))
	if p.LockTimeout <= 0 {
		b.Queue(d.q.claimBatch, p.Consumer, p.IDs, p.Now).Query(func(rows pgx.Rows) error {
			return scanClaimed(rows, p.IDs, claimed)
		})
	} else {
		b.Queue(d.q.claimBatchBounded, p.Consumer, p.IDs, p.Now, lockTimeout(p.LockTimeout)).QueryRow(func(row pgx.Row) error {
			var ids []string
			if err := row.Scan(&ids, nil); err != nil {
				return err
			}
			return markClaimed(ids, p.IDs, claimed)
		})
	}
	tx, err := d.sendBegin(ctx, b)
	if err != nil {
		return nil, nil, err
	}
	return tx, claimed, nil
}

// Claim implements inboxdriver.Driver, inside the caller's transaction.
func (d *Driver) Claim(ctx context.Context, tx pgx.Tx, p *inboxdriver.ClaimParams) (bool, error) {
	b := &pgx.Batch{}
	claimed := d.queueClaim(b, p)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return false, err
	}
	return *claimed, nil
}

// queueClaim queues the claim of one id and returns where its result will
// be. With a lock timeout, the claim is the bounded one, which applies the
// bound to the claim and not to the handler.
func (d *Driver) queueClaim(b *pgx.Batch, p *inboxdriver.ClaimParams) *bool {
	claimed := new(bool)
	if p.LockTimeout <= 0 {
		b.Queue(d.q.claim, p.Consumer, p.ID, p.Now).Exec(func(ct pgconn.CommandTag) error {
			*claimed = ct.RowsAffected() == 1
			return nil
		})
		return claimed
	}
	b.Queue(d.q.claimBounded, p.Consumer, p.ID, p.Now, lockTimeout(p.LockTimeout)).QueryRow(func(row pgx.Row) error {
		var n int64
		if err := row.Scan(&n, nil); err != nil {
			return err
		}
		*claimed = n == 1
		return nil
	})
	return claimed
}

// lockTimeout renders a lock timeout for set_config, in whole milliseconds
// and at least one, since zero would mean no bound.
func lockTimeout(d time.Duration) string {
	return fmt.Sprintf("%dms", max(d.Milliseconds(), 1))
}

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
	var got []string
	var id string
	for rows.Next() {
		if err := rows.Scan(&id); err != nil {
			return err
		}
		got = append(got, id)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return markClaimed(got, ids, claimed)
}

// markClaimed sets claimed[i] for each ids[i] in got, the ids the claim
// returned.
func markClaimed(got, ids []string, claimed []bool) error {
	at := make(map[string]int, len(ids))
	for i, id := range ids {
		at[id] = i
	}
	for _, id := range got {
		i, ok := at[id]
		if !ok {
			return fmt.Errorf("inboxpgx: claim returned id %q that was not asked for", id)
		}
		claimed[i] = true
	}
	return nil
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
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = tx.Rollback(rctx)
}

// lockID hashes a lock name to an advisory lock key.
func lockID(name string) int64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return int64(h.Sum64())
}
