package inboxsql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/txinbox/inbox/inboxdriver"
)

// WithLock implements inboxdriver.Admin: a session advisory lock on
// Postgres, a named lock (GET_LOCK) on MySQL, held on one connection while
// fn runs. SQLite has neither: there the lock is held within this Driver's
// process only (see the notes on SQLite in sqlite.go).
func (d *Driver) WithLock(ctx context.Context, key string, fn func(ctx context.Context) error) (bool, error) {
	if d.dialect == SQLite {
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
	}
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	ok, err := d.tryLock(ctx, conn, key, 0)
	if err != nil || !ok {
		return false, err
	}
	defer d.unlock(ctx, conn, key)
	return true, fn(ctx)
}

// tryLock takes the named lock on conn, waiting at most wait (whole
// seconds, MySQL only).
func (d *Driver) tryLock(ctx context.Context, conn *sql.Conn, key string, wait time.Duration) (bool, error) {
	if d.dialect == Postgres {
		var ok bool
		err := conn.QueryRowContext(ctx, `SELECT pg_try_advisory_lock($1)`, lockID(key)).Scan(&ok)
		return ok, err
	}
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

// unlock releases the named lock on conn. A connection that cannot unlock
// must not go back to the pool holding the lock: it is discarded.
func (d *Driver) unlock(ctx context.Context, conn *sql.Conn, key string) {
	uctx, cancel := ctxWithoutCancel(ctx)
	defer cancel()
	var err error
	if d.dialect == Postgres {
		_, err = conn.ExecContext(uctx, `SELECT pg_advisory_unlock($1)`, lockID(key))
	} else {
		_, err = conn.ExecContext(uctx, `SELECT RELEASE_LOCK(`+mysqlLockName+`)`, key)
	}
	if err != nil {
		discard(conn)
	}
}

// lockID hashes a lock name to a Postgres advisory lock key.
func lockID(name string) int64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return int64(h.Sum64())
}

// WithMigrationLock implements inboxdriver.Admin. It waits for the lock:
// an advisory lock on Postgres, a named lock on MySQL. On SQLite it holds
// a BEGIN IMMEDIATE transaction, which excludes every other writer, and
// the migrations fn runs are savepoints inside it.
func (d *Driver) WithMigrationLock(ctx context.Context, fn func(ctx context.Context) error) error {
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if d.dialect == SQLite {
		return d.sqliteMigrationLock(ctx, conn, fn)
	}
	key := "inbox-migrate:" + d.tables.Schema + "." + d.tables.Migrations
	if d.dialect == Postgres {
		if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, lockID(key)); err != nil {
			return err
		}
	} else {
		for {
			ok, err := d.tryLock(ctx, conn, key, 5*time.Second)
			if err != nil {
				return err
			}
			if ok {
				break
			}
			if err := ctx.Err(); err != nil {
				return err
			}
		}
	}
	defer d.unlock(ctx, conn, key)
	return fn(ctx)
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
