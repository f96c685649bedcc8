package inboxsql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/txinbox/inbox/inboxdriver"
)

// Errors.
//
// [Driver.Classify] maps the engine's errors for the client:
// serialization failures, deadlocks and SQLITE_BUSY are conflicts, retried
// from the claim; lock-wait timeouts are inbox.ErrLockTimeout; a broken
// connection, a server shutting down, read-only, or refusing connections
// (whatever the reason it gives: MySQL 1044, 1045, 1049; a Postgres
// SQLSTATE in a connect error), and an unreadable SQLite file are
// inbox.ErrUnavailable, never a reason to dead-letter; a missing privilege
// is inbox.ErrPermissionDenied. [Driver.TxBroken] tells a handler's own
// io.EOF or net.Error, which is the message's, from a lost connection.

// Classify implements inboxdriver.Admin.
func (d *Driver) Classify(err error) inboxdriver.ErrorClass {
	if err == nil {
		return inboxdriver.ClassOther
	}
	var lw *lockWaitError
	if errors.As(err, &lw) {
		return inboxdriver.ClassLockTimeout
	}
	class := d.engine.Classify(err)
	if class != inboxdriver.ClassOther {
		return class
	}
	switch d.dialect {
	case SQLite:
		class = classifySQLite(err)
	case Postgres:
		class = classifyPostgres(err)
	}
	if class != inboxdriver.ClassOther {
		return class
	}
	if unavailable(err) {
		return inboxdriver.ClassUnavailable
	}
	return inboxdriver.ClassOther
}

func classifySQLite(err error) inboxdriver.ErrorClass {
	code, ok := sqliteCode(err)
	if !ok {
		return inboxdriver.ClassOther
	}
	switch code & 0xff {
	case sqliteBusy, sqliteLocked:
		// Another connection holds the lock (and the busy timeout ran
		// out), or this transaction's snapshot is stale
		// (SQLITE_BUSY_SNAPSHOT): run the transaction again.
		return inboxdriver.ClassConflict
	case sqliteCantOpen, sqliteIOErr, sqliteFull, sqliteNotADB, sqliteCorrupt,
		sqliteProtocol, sqliteNoMem, sqliteReadOnly, sqlitePerm:
		// The file cannot be opened, read or written: no message is at
		// fault.
		return inboxdriver.ClassUnavailable
	case sqliteError:
		// SQLite reports a missing table or column with its generic
		// result code, in a message such as "SQL logic error: no such
		// table: inbox (1)": the message is all there is to tell by.
		msg := err.Error()
		if strings.Contains(msg, "no such table") || strings.Contains(msg, "no such column") {
			return inboxdriver.ClassNotMigrated
		}
	}
	return inboxdriver.ClassOther
}

func classifyPostgres(err error) inboxdriver.ErrorClass {
	var st interface{ SQLState() string }
	if !errors.As(err, &st) {
		return inboxdriver.ClassOther
	}
	code := st.SQLState()
	switch {
	case code == "40001", code == "40P01":
		return inboxdriver.ClassConflict
	case code == "55P03":
		return inboxdriver.ClassLockTimeout
	case code == "42501":
		return inboxdriver.ClassDenied
	case code == "42P01", code == "42703", code == "3F000": // undefined_table, undefined_column, invalid_schema_name
		return inboxdriver.ClassNotMigrated
	case strings.HasPrefix(code, "08"), // connection exception
		code == "57P01", code == "57P02", code == "57P03", // shutdown, crash, cannot connect now
		code == "53300", // too many connections
		code == "25006": // read-only transaction: a standby, or a primary demoted in a failover
		return inboxdriver.ClassUnavailable
	}
	return inboxdriver.ClassOther
}

// TxBroken implements inboxdriver.Driver. An error that the engine or the
// dialect's codes call unavailable (a server shutting down, a connection
// killed, a read-only server, a file that cannot be written) is the
// store's. An io.EOF or a net.Error may be the handler's own, from its
// payload or another service: then a SELECT 1 on tx tells whether tx's
// connection still answers.
func (d *Driver) TxBroken(ctx context.Context, tx *sql.Tx, err error) bool {
	if d.typedUnavailable(err) {
		return true
	}
	if !unavailable(err) {
		return false
	}
	pctx, cancel := ctxWithoutCancel(ctx)
	defer cancel()
	_, perr := tx.ExecContext(pctx, `SELECT 1`)
	return perr != nil && (d.typedUnavailable(perr) || unavailable(perr))
}

// typedUnavailable reports the errors that the driver or the server gives
// only when the store cannot serve: never a handler's own.
func (d *Driver) typedUnavailable(err error) bool {
	if d.engine.Classify(err) == inboxdriver.ClassUnavailable ||
		errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) {
		return true
	}
	switch d.dialect {
	case SQLite:
		return classifySQLite(err) == inboxdriver.ClassUnavailable
	case Postgres:
		return classifyPostgres(err) == inboxdriver.ClassUnavailable
	}
	return false
}

// unavailable reports the errors of a connection that broke or could not
// be made, whatever the driver. A done context is the caller's, not the
// store's, even though its deadline error is a net.Error.
func unavailable(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var netErr net.Error
	return errors.Is(err, driver.ErrBadConn) ||
		errors.Is(err, sql.ErrConnDone) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.As(err, &netErr)
}
