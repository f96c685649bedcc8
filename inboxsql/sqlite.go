package inboxsql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"math"
	"time"
)

// DefaultSQLiteBusyTimeout is how long a connection that inboxsqlite.Open
// opened waits for a lock that another connection holds, such as the write
// lock, before it fails with SQLITE_BUSY. A claim waits for
// Config.LockTimeout instead.
const DefaultSQLiteBusyTimeout = 5 * time.Second

// SQLite result codes this package tells apart; an extended code carries
// its primary code in its low byte.
const (
	sqlitePerm     = 3
	sqliteError    = 1
	sqliteBusy     = 5
	sqliteLocked   = 6
	sqliteNoMem    = 7
	sqliteReadOnly = 8
	sqliteIOErr    = 10
	sqliteCorrupt  = 11
	sqliteFull     = 13
	sqliteCantOpen = 14
	sqliteProtocol = 15
	sqliteNotADB   = 26
)

// sqliteCode returns the SQLite result code of err, if it has one.
func sqliteCode(err error) (int, bool) {
	var c interface{ Code() int }
	if errors.As(err, &c) {
		return c.Code(), true
	}
	return 0, false
}

// sqliteLockWait turns a busy error (the plain SQLITE_BUSY of a wait that
// ran out, not SQLITE_BUSY_SNAPSHOT) into a lockWaitError.
func sqliteLockWait(err error, timeout time.Duration) error {
	if code, ok := sqliteCode(err); ok && code == sqliteBusy {
		return &lockWaitError{timeout: timeout, err: err}
	}
	return err
}

// SQLite.
//
// inboxsqlite.Open opens a database file the way this store expects: WAL mode,
// so that readers do not block the writer; a busy timeout, so that a writer
// waits for the write lock instead of failing at once; synchronous=FULL,
// so that a commit is durable before the message is acked; and BEGIN
// IMMEDIATE for every read-write transaction, so that a transaction takes
// the write lock at its start. A transaction that began DEFERRED, read, and
// then tried to write would fail with SQLITE_BUSY_SNAPSHOT without waiting,
// whenever another connection wrote in between. If you open the database
// yourself, use the same settings.
//
// SQLite has no advisory locks. The lock that picks one cleaner
// (inbox.Admin.RunCleaner) is held within the Driver's process only; two
// processes may each purge at once, which is harmless: every purge batch is
// a short write transaction, and the write lock serialises them. Migrations
// run inside one BEGIN IMMEDIATE transaction, which excludes every other
// migrator, in any process.

// beginSQLite begins a transaction whose wait for the write lock, in its
// BEGIN IMMEDIATE or else in its claim, is bounded by lockTimeout: on one
// pinned connection, it sets busy_timeout to lockTimeout, begins, claims,
// and restores busy_timeout. The connection goes back to the pool when the
// transaction ends, in Commit or Rollback.
func (d *Driver) beginSQLite(ctx context.Context, lockTimeout time.Duration, claim func(tx *sql.Tx, bounded bool) error) (*sql.Tx, error) {
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	saved, err := busyTimeout(ctx, conn)
	if err != nil {
		conn.Close()
		return nil, err
	}
	if err := setBusyTimeout(ctx, conn, busyMillis(lockTimeout)); err != nil {
		discard(conn)
		return nil, err
	}
	tx, err := conn.BeginTx(ctx, d.txOptions)
	if err == nil {
		err = claim(tx, true)
		if err != nil {
			_ = tx.Rollback()
		}
	} else {
		err = sqliteLockWait(err, lockTimeout)
	}
	if err != nil {
		cctx, cancel := ctxWithoutCancel(ctx)
		defer cancel()
		if rerr := setBusyTimeout(cctx, conn, saved); rerr != nil {
			discard(conn)
		} else {
			conn.Close()
		}
		return nil, err
	}
	if err := setBusyTimeout(ctx, tx, saved); err != nil {
		_ = tx.Rollback()
		discard(conn)
		return nil, err
	}
	d.pinned.Store(tx, conn)
	return tx, nil
}

// withBusyTimeout runs fn with the busy timeout of q's connection set to
// timeout, and restores it.
func withBusyTimeout(ctx context.Context, q execQuerier, timeout time.Duration, fn func() error) error {
	saved, err := busyTimeout(ctx, q)
	if err != nil {
		return err
	}
	if err := setBusyTimeout(ctx, q, busyMillis(timeout)); err != nil {
		return err
	}
	err = fn()
	cctx, cancel := ctxWithoutCancel(ctx)
	defer cancel()
	if rerr := setBusyTimeout(cctx, q, saved); rerr != nil && err == nil {
		err = fmt.Errorf("inboxsql: restore busy_timeout: %w", rerr)
	}
	return err
}

// execQuerier is what *sql.DB, *sql.Conn and *sql.Tx share.
type execQuerier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func busyTimeout(ctx context.Context, q execQuerier) (int64, error) {
	var ms int64
	err := q.QueryRowContext(ctx, `PRAGMA busy_timeout`).Scan(&ms)
	return ms, err
}

func setBusyTimeout(ctx context.Context, q execQuerier, ms int64) error {
	// A PRAGMA takes no bind parameters; ms is an integer.
	_, err := q.ExecContext(ctx, fmt.Sprintf(`PRAGMA busy_timeout = %d`, ms))
	return err
}

// busyMillis converts a wait to SQLite's busy_timeout, at least 1ms.
func busyMillis(d time.Duration) int64 {
	return min(max(d.Milliseconds(), 1), math.MaxInt32)
}

// discard closes conn and keeps it out of the pool, for a connection left
// with a setting it could not restore.
func discard(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = conn.Close()
}
