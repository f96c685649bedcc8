package inboxsql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/internal/pglock"
)

// WithLock implements inboxdriver.Admin. On Postgres it is a
// transaction-scoped advisory lock, in a transaction of its own that stays
// open while fn runs (see internal/pglock), correct behind a transaction
// pooler. On MySQL it is a named lock (GET_LOCK), a session lock held on
// one connection of the pool while fn runs; that connection's wait_timeout
// is lowered to mysqlLockIdle, and kept alive, so that the server ends the
// session of a holder that froze (see mysqlHold). SQLite has neither:
// there the lock is held within this Driver's process only (see the notes
// on SQLite in sqlite.go).
func (d *Driver) WithLock(ctx context.Context, key string, fn func(ctx context.Context) error) (bool, error) {
	switch d.dialect {
	case SQLite:
		d.locksMu.Lock()
		if d.locks[key] {
			d.locksMu.Unlock()
			return false, nil
		}
		d.locks[key] = true
		d.locksMu.Unlock()
		defer func() {
			d.locksMu.Lock()
			delete(d.locks, key)
			d.locksMu.Unlock()
		}()
		return true, fn(ctx)
	case Postgres:
		return pglock.Hold(ctx, d.beginLock, pglock.Options{Name: key}, fn)
	}
	return d.mysqlHold(ctx, key, false, fn)
}

// beginLock begins a Postgres lock transaction.
func (d *Driver) beginLock(ctx context.Context) (pglock.Tx, error) {
	tx, err := d.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return nil, err
	}
	return lockTx{tx}, nil
}

type lockTx struct{ tx *sql.Tx }

func (t lockTx) Exec(ctx context.Context, query string) error {
	_, err := t.tx.ExecContext(ctx, query)
	return err
}

func (t lockTx) QueryBool(ctx context.Context, query string, args ...any) (bool, error) {
	var b bool
	err := t.tx.QueryRowContext(ctx, query, args...).Scan(&b)
	return b, err
}

// Rollback ends the transaction; database/sql discards a connection whose
// rollback failed on a broken connection.
func (t lockTx) Rollback(context.Context) error { return t.tx.Rollback() }

// mysqlLockIdle bounds how long a MySQL named lock stays held by a holder
// that froze or lost its network: the lock connection's wait_timeout, in
// seconds. The holder pings it every third of that.
const mysqlLockIdle = 30 * time.Second

// mysqlHold runs fn while holding the named lock key on a connection of
// its own, waiting for it if wait.
func (d *Driver) mysqlHold(ctx context.Context, key string, wait bool, fn func(ctx context.Context) error) (bool, error) {
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `SET SESSION wait_timeout = `+strconv.Itoa(int(mysqlLockIdle/time.Second))); err != nil {
		return false, err
	}
	// The connection goes back to the pool with the server's wait_timeout,
	// or not at all.
	defer func() {
		rctx, cancel := ctxWithoutCancel(ctx)
		defer cancel()
		if _, err := conn.ExecContext(rctx, `SET SESSION wait_timeout = @@GLOBAL.wait_timeout`); err != nil {
			discard(conn)
		}
	}()
	for {
		ok, err := d.tryLock(ctx, conn, key, 5*time.Second)
		if err != nil {
			return false, err
		}
		if ok {
			break
		}
		if !wait {
			return false, nil
		}
		if err := ctx.Err(); err != nil {
			return false, err
		}
	}
	defer d.unlock(ctx, conn, key)

	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var lost error
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(mysqlLockIdle / 3)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			pctx, pcancel := context.WithTimeout(context.WithoutCancel(ctx), mysqlLockIdle/3)
			err := conn.PingContext(pctx)
			pcancel()
			if err != nil {
				lost = fmt.Errorf("lock %q: %w: %w", key, pglock.ErrLost, err)
				cancel(lost)
				return
			}
		}
	}()
	err = fn(fctx)
	close(stop)
	wg.Wait()
	return true, errors.Join(err, lost)
}

// tryLock takes the MySQL named lock on conn, waiting at most wait (whole
// seconds).
func (d *Driver) tryLock(ctx context.Context, conn *sql.Conn, key string, wait time.Duration) (bool, error) {
	var got sql.NullInt64
	err := conn.QueryRowContext(ctx, `SELECT GET_LOCK(`+mysqlLockName+`, ?)`, key, int64(wait/time.Second)).Scan(&got)
	if err != nil {
		return false, err
	}
	if !got.Valid {
		return false, fmt.Errorf("inboxsql: GET_LOCK of %q failed", key)
	}
	return got.Int64 == 1, nil
}

// mysqlLockName names a MySQL lock after a key and the current database,
// within the 64 characters a lock name may have. Locks are server-wide.
const mysqlLockName = `CONCAT('inbox-', LEFT(SHA2(CONCAT_WS(':', DATABASE(), ?), 256), 48))`

// unlock releases the MySQL named lock on conn. A connection that cannot
// unlock must not go back to the pool holding the lock: it is discarded.
func (d *Driver) unlock(ctx context.Context, conn *sql.Conn, key string) {
	uctx, cancel := ctxWithoutCancel(ctx)
	defer cancel()
	if _, err := conn.ExecContext(uctx, `SELECT RELEASE_LOCK(`+mysqlLockName+`)`, key); err != nil {
		discard(conn)
	}
}

// WithMigrationLock implements inboxdriver.Admin. It waits for the lock:
// on Postgres a transaction-scoped advisory lock (polled, so that a waiter
// holds no server connection of a pooler), on MySQL a named lock. On
// SQLite it holds a BEGIN IMMEDIATE transaction, which excludes every
// other writer, and the migrations fn runs are savepoints inside it.
func (d *Driver) WithMigrationLock(ctx context.Context, fn func(ctx context.Context) error) error {
	key := "inbox-migrate:" + d.tables.Schema + "." + d.tables.Migrations
	switch d.dialect {
	case Postgres:
		_, err := pglock.Hold(ctx, d.beginLock, pglock.Options{Name: key, Wait: true}, fn)
		return err
	case MySQL, MariaDB:
		_, err := d.mysqlHold(ctx, key, true, fn)
		return err
	}
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return d.sqliteMigrationLock(ctx, conn, fn)
}

// migrationConn is the context key of the connection that holds SQLite's
// migration transaction.
type migrationConn struct{ d *Driver }

func (d *Driver) sqliteMigrationLock(ctx context.Context, conn *sql.Conn, fn func(ctx context.Context) error) error {
	for {
		_, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`)
		if err == nil {
			break
		}
		if code, ok := sqliteCode(err); !ok || code&0xff != sqliteBusy {
			return err
		}
		// The busy timeout ran out behind another writer: wait again.
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return errors.Join(err, ctx.Err())
		case <-t.C:
		}
	}
	err := fn(context.WithValue(ctx, migrationConn{d}, conn))
	// Commit what fn did even when it failed: each migration was a
	// savepoint of its own, released only when it succeeded.
	cctx, cancel := ctxWithoutCancel(ctx)
	defer cancel()
	if _, cerr := conn.ExecContext(cctx, `COMMIT`); cerr != nil {
		_, _ = conn.ExecContext(cctx, `ROLLBACK`)
		discard(conn)
		return errors.Join(err, cerr)
	}
	return err
}

// MigrationTx implements inboxdriver.Admin. MySQL commits DDL implicitly;
// see inboxmigrate.
func (d *Driver) MigrationTx(ctx context.Context, fn func(ctx context.Context, q inboxdriver.Querier) error) error {
	if d.dialect == SQLite {
		if conn, ok := ctx.Value(migrationConn{d}).(*sql.Conn); ok {
			return savepoint(ctx, conn, fn)
		}
		conn, err := d.db.Conn(ctx)
		if err != nil {
			return err
		}
		defer conn.Close()
		return d.sqliteMigrationLock(ctx, conn, func(ctx context.Context) error {
			return savepoint(ctx, conn, fn)
		})
	}
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(ctx, querier{tx}); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// savepoint runs fn in a savepoint on conn, which is in a transaction.
func savepoint(ctx context.Context, conn *sql.Conn, fn func(ctx context.Context, q inboxdriver.Querier) error) error {
	if _, err := conn.ExecContext(ctx, `SAVEPOINT inbox_migration`); err != nil {
		return err
	}
	if err := fn(ctx, querier{conn}); err != nil {
		cctx, cancel := ctxWithoutCancel(ctx)
		defer cancel()
		_, rerr := conn.ExecContext(cctx, `ROLLBACK TO inbox_migration`)
		if rerr == nil {
			_, rerr = conn.ExecContext(cctx, `RELEASE inbox_migration`)
		}
		return errors.Join(err, rerr)
	}
	_, err := conn.ExecContext(ctx, `RELEASE inbox_migration`)
	return err
}

// querier runs a migration's statements.
type querier struct{ q execQuerier }

func (q querier) Exec(ctx context.Context, query string, args ...any) error {
	_, err := q.q.ExecContext(ctx, query, args...)
	return err
}

func (q querier) QueryInts(ctx context.Context, query string, args ...any) ([]int64, error) {
	rows, err := q.q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var n int64
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, rows.Err()
}
