package inboxpgx

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/inbox/internal/pglock"
)

// WithLock implements inboxdriver.Admin with a transaction-scoped advisory
// lock, taken in a transaction on a pooled connection of its own that stays
// open while fn runs (see internal/pglock): correct behind a transaction
// pooler, and released by the server when the holder dies, or
// pglock.IdleTimeout after a frozen holder's last keepalive.
func (d *Driver) WithLock(ctx context.Context, key string, fn func(ctx context.Context) error) (bool, error) {
	return pglock.Hold(ctx, d.beginLock, pglock.Options{Name: key, IdleTimeout: d.lockIdle}, fn)
}

// WithMigrationLock implements inboxdriver.Admin. It waits for the lock,
// polling, so that a waiter holds no server connection of a pooler.
func (d *Driver) WithMigrationLock(ctx context.Context, fn func(ctx context.Context) error) error {
	key := "inbox-migrate:" + d.tables.Schema + "." + d.tables.Migrations
	_, err := pglock.Hold(ctx, d.beginLock, pglock.Options{Name: key, Wait: true, IdleTimeout: d.lockIdle}, fn)
	return err
}

// beginLock begins a lock transaction on a connection of its own.
func (d *Driver) beginLock(ctx context.Context) (pglock.Tx, error) {
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		conn.Release()
		return nil, err
	}
	return &lockTx{conn: conn, tx: tx}, nil
}

type lockTx struct {
	conn *pgxpool.Conn
	tx   pgx.Tx
}

func (t *lockTx) Exec(ctx context.Context, sql string) error {
	_, err := t.tx.Exec(ctx, sql)
	return err
}

func (t *lockTx) QueryBool(ctx context.Context, sql string, args ...any) (bool, error) {
	var b bool
	err := t.tx.QueryRow(ctx, sql, args...).Scan(&b)
	return b, err
}

func (t *lockTx) Rollback(ctx context.Context) error {
	err := t.tx.Rollback(ctx)
	if err != nil {
		// Never hand back a connection that may still hold the lock.
		_ = t.conn.Conn().Close(ctx)
	}
	t.conn.Release()
	return err
}
