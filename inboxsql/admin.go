package inboxsql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxtype"
)

// PurgeBatch implements inboxdriver.Admin: it deletes a batch of inbox
// rows and the ledger entries of the same messages. On Postgres that is one
// statement, which skips rows that in-flight claims lock. On SQLite, which
// has no row locks, it is one short write transaction; with the ledger in
// a file of its own (Config.EffectsDB), the batch's ledger entries are
// deleted first, in that file, and then its inbox rows, so that a crash in
// between leaves inbox rows, which the next purge deletes, and never a
// purged message whose ledger entries outlive it. On MySQL it is one
// transaction that locks the batch, in index order, and deletes its ledger
// entries and its rows.
func (d *Driver) PurgeBatch(ctx context.Context, p *inboxdriver.PurgeParams) (int64, error) {
	args := []any{p.OlderThan.Microseconds()}
	i := 0
	if p.Consumer != "" {
		args = append(args, p.Consumer)
		i = 1
	}
	args = append(args, p.Limit)
	switch {
	case d.dialect == Postgres:
		var n int64
		err := d.db.QueryRowContext(ctx, d.q.purge[i], args...).Scan(&n)
		return n, err
	case d.dialect == SQLite && d.effectsDB == nil:
		var n int64
		err := inTx(ctx, d.db, func(tx *sql.Tx) error {
			// A write first, so that even a DEFERRED transaction takes the
			// write lock before it reads.
			keys, err := selectKeys(ctx, tx, d.q.purge[i], args)
			if err != nil || len(keys) == 0 {
				return err
			}
			if _, err := d.deleteKeys(ctx, tx, d.q.effects, keys, nil); err != nil {
				return err
			}
			n = int64(len(keys))
			return nil
		})
		return n, err
	case d.dialect == SQLite:
		keys, err := selectKeys(ctx, d.db, d.q.purgeSelect[i], args)
		if err != nil || len(keys) == 0 {
			return 0, err
		}
		if err := inTx(ctx, d.effectsDB, func(tx *sql.Tx) error {
			_, err := d.deleteKeys(ctx, tx, d.q.effects, keys, nil)
			return err
		}); err != nil {
			return 0, fmt.Errorf("inboxsql: purge the ledger entries in Config.EffectsDB: %w", err)
		}
		var n int64
		err = inTx(ctx, d.db, func(tx *sql.Tx) error {
			var err error
			n, err = d.deleteKeys(ctx, tx, d.q.inbox, keys, p.OlderThan.Microseconds())
			return err
		})
		return n, err
	default: // MySQL
		var n int64
		err := inTx(ctx, d.db, func(tx *sql.Tx) error {
			keys, err := selectKeys(ctx, tx, d.q.purgeSelect[i], args)
			if err != nil || len(keys) == 0 {
				return err
			}
			if _, err := d.deleteKeys(ctx, tx, d.q.effects, keys, nil); err != nil {
				return err
			}
			n, err = d.deleteKeys(ctx, tx, d.q.inbox, keys, nil)
			return err
		})
		return n, err
	}
}

// selectKeys reads the keys of the inbox rows that query selects, or
// deletes and returns.
func selectKeys(ctx context.Context, q execQuerier, query string, args []any) ([]msgKey, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var keys []msgKey
	for rows.Next() {
		var k msgKey
		if err := rows.Scan(&k.consumer, &k.id); err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, rows.Err()
}

// deleteKeys deletes the rows of keys from table (SQLite, MySQL), in
// statements of at most maxKeysPerStatement keys, and returns how many it
// deleted. With olderThan (microseconds), it deletes only rows processed
// longer ago than that, by the database's clock.
func (d *Driver) deleteKeys(ctx context.Context, q execQuerier, table string, keys []msgKey, olderThan any) (int64, error) {
	var total int64
	for start := 0; start < len(keys); start += maxKeysPerStatement {
		query, args := d.q.deleteKeys(table, keys[start:min(start+maxKeysPerStatement, len(keys))], olderThan)
		res, err := q.ExecContext(ctx, query, args...)
		if err != nil {
			return total, err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, err
		}
		total += n
	}
	return total, nil
}

// inTx runs fn in a transaction of db, and commits it unless fn fails.
func inTx(ctx context.Context, db interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}, fn func(tx *sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// PurgeCount implements inboxdriver.Admin.
func (d *Driver) PurgeCount(ctx context.Context, p *inboxdriver.PurgeParams) (int64, error) {
	args := []any{p.OlderThan.Microseconds()}
	i := 0
	if p.Consumer != "" {
		args = append(args, p.Consumer)
		i = 1
	}
	var n int64
	err := d.db.QueryRowContext(ctx, d.q.purgeCount[i], args...).Scan(&n)
	return n, err
}

// Forget implements inboxdriver.Admin: it deletes the message's inbox row
// and its ledger entries, and reports whether there was either. On Postgres
// that is one statement. On MySQL and SQLite it is one transaction that
// deletes the inbox row first: on MySQL that waits for an in-flight
// delivery of the message before taking any lock on the ledger, which that
// delivery's Effect may still need. With the SQLite ledger in a file of its
// own (Config.EffectsDB), the ledger entries are deleted first, in that
// file, then the inbox row: a crash in between leaves the row, and Forget
// can be run again.
func (d *Driver) Forget(ctx context.Context, p *inboxdriver.ForgetParams) (bool, error) {
	switch {
	case d.dialect == Postgres:
		var n int64
		err := d.db.QueryRowContext(ctx, d.q.forget, p.Consumer, p.ID).Scan(&n)
		return n > 0, err
	case d.effectsDB != nil:
		effects, err := execCount(ctx, d.effectsDB, d.q.effectForget, p.Consumer, p.ID)
		if err != nil {
			return false, fmt.Errorf("inboxsql: forget the ledger entries in Config.EffectsDB: %w", err)
		}
		rows, err := execCount(ctx, d.db, d.q.forget, p.Consumer, p.ID)
		return rows+effects > 0, err
	default:
		var n int64
		err := inTx(ctx, d.db, func(tx *sql.Tx) error {
			rows, err := execCount(ctx, tx, d.q.forget, p.Consumer, p.ID)
			if err != nil {
				return err
			}
			effects, err := execCount(ctx, tx, d.q.effectForget, p.Consumer, p.ID)
			n = rows + effects
			return err
		})
		return n > 0, err
	}
}

// ForgetCount implements inboxdriver.Admin.
func (d *Driver) ForgetCount(ctx context.Context, p *inboxdriver.ForgetParams) (inboxtype.ForgetCounts, error) {
	var n inboxtype.ForgetCounts
	if err := d.db.QueryRowContext(ctx, d.q.forgetCount[0], p.Consumer, p.ID).Scan(&n.InboxRows); err != nil {
		return n, err
	}
	ledger := d.db
	if d.effectsDB != nil {
		ledger = d.effectsDB
	}
	err := ledger.QueryRowContext(ctx, d.q.forgetCount[1], p.Consumer, p.ID).Scan(&n.Effects)
	return n, err
}

// execCount runs a statement and returns the rows it affected.
func execCount(ctx context.Context, q execQuerier, query string, args ...any) (int64, error) {
	res, err := q.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// Stats implements inboxdriver.Admin. TableBytes is what the engine tells:
// pg_total_relation_size on Postgres; the pages of the table and its
// index in the dbstat table on SQLite (-1 if the build lacks it); InnoDB's
// estimate of data and index length on MySQL, which lags behind recent
// writes until InnoDB refreshes its statistics.
func (d *Driver) Stats(ctx context.Context) (*inboxtype.Stats, error) {
	rows, err := d.db.QueryContext(ctx, d.q.stats)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	s := &inboxtype.Stats{}
	for rows.Next() {
		var c inboxtype.ConsumerStats
		if err := rows.Scan(&c.Consumer, &c.Rows, d.timeScanner(&c.Oldest), d.timeScanner(&c.Newest)); err != nil {
			return nil, err
		}
		s.Consumers = append(s.Consumers, c)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	s.TableBytes, err = d.tableBytes(ctx)
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (d *Driver) tableBytes(ctx context.Context) (int64, error) {
	var n sql.NullInt64
	var err error
	switch d.dialect {
	case Postgres:
		err = d.db.QueryRowContext(ctx, d.q.tableSize, d.q.inbox).Scan(&n)
	case SQLite:
		err = d.db.QueryRowContext(ctx, d.q.tableSize, d.tables.Inbox).Scan(&n)
		if code, ok := sqliteCode(err); ok && code == sqliteError {
			return -1, nil // no dbstat in this build
		}
	default:
		err = d.db.QueryRowContext(ctx, d.q.tableSize, d.tables.Schema, d.tables.Inbox).Scan(&n)
		if errors.Is(err, sql.ErrNoRows) {
			return -1, nil
		}
	}
	if err != nil {
		return 0, err
	}
	if !n.Valid {
		return -1, nil
	}
	return n.Int64, nil
}
