package inboxsql

import (
	"context"
	"database/sql"
	"errors"

	"github.com/txinbox/inbox/inboxdriver"
)

// sqliteError is SQLite's generic SQLITE_ERROR, such as "no such table".
const sqliteError = 1

// PurgeBatch implements inboxdriver.Admin. On Postgres it skips rows that
// in-flight claims lock. SQLite has no row locks: each batch is one short
// write transaction. On MySQL it is one DELETE … LIMIT in index order.
func (d *Driver) PurgeBatch(ctx context.Context, p *inboxdriver.PurgeParams) (int64, error) {
	args := []any{d.timeArg(p.Before)}
	i := 0
	if p.Consumer != "" {
		args = append(args, p.Consumer)
		i = 1
	}
	args = append(args, p.Limit)
	res, err := d.db.ExecContext(ctx, d.q.purge[i], args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// PurgeCount implements inboxdriver.Admin.
func (d *Driver) PurgeCount(ctx context.Context, p *inboxdriver.PurgeParams) (int64, error) {
	args := []any{d.timeArg(p.Before)}
	i := 0
	if p.Consumer != "" {
		args = append(args, p.Consumer)
		i = 1
	}
	var n int64
	err := d.db.QueryRowContext(ctx, d.q.purgeCount[i], args...).Scan(&n)
	return n, err
}

// Forget implements inboxdriver.Admin.
func (d *Driver) Forget(ctx context.Context, p *inboxdriver.ForgetParams) (bool, error) {
	res, err := d.db.ExecContext(ctx, d.q.forget, p.Consumer, p.ID)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

// Stats implements inboxdriver.Admin. TableBytes is what the engine tells:
// pg_total_relation_size on Postgres; the pages of the table and its
// index in the dbstat table on SQLite (-1 if the build lacks it); InnoDB's
// estimate of data and index length on MySQL, which lags behind recent
// writes until InnoDB refreshes its statistics.
func (d *Driver) Stats(ctx context.Context) (*inboxdriver.Stats, error) {
	rows, err := d.db.QueryContext(ctx, d.q.stats)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	s := &inboxdriver.Stats{}
	for rows.Next() {
		var c inboxdriver.ConsumerStats
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
