// Package inboxmysql is the MySQL and MariaDB engine of the inbox's
// database/sql store, through go-sql-driver/mysql: importing it registers
// that driver as "mysql", and nothing else.
//
//	db, err := sql.Open("mysql", "user:password@tcp(127.0.0.1:3306)/app")
//	if err != nil { ... }
//	d, err := inboxsql.New(db, inboxmysql.MariaDB, nil) // or inboxmysql.MySQL
//
// Pass MariaDB for a MariaDB server (10.5 or later), MySQL otherwise. See
// package inboxsql for the store itself.
package inboxmysql

import (
	"errors"

	"github.com/go-sql-driver/mysql"

	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxsql"
)

// The engines, for inboxsql.New.
var (
	// MySQL is MySQL 8.0 or later.
	MySQL inboxsql.Engine = engine{dialect: inboxsql.MySQL}
	// MariaDB is MariaDB 10.5 or later, whose RETURNING and SET STATEMENT
	// make its claims cheaper.
	MariaDB inboxsql.Engine = engine{dialect: inboxsql.MariaDB}
)

// Server error numbers this package tells apart.
const (
	errDuplicateKey     = 1062 // ER_DUP_ENTRY
	errLockWaitTimeout  = 1205 // ER_LOCK_WAIT_TIMEOUT
	errDeadlock         = 1213 // ER_LOCK_DEADLOCK
	errRecordChanged    = 1020 // ER_CHECKREAD: a snapshot-isolation write conflict
	errTooManyConns     = 1040 // ER_CON_COUNT_ERROR
	errShutdown         = 1053 // ER_SERVER_SHUTDOWN
	errReadOnly         = 1290 // ER_OPTION_PREVENTS_STATEMENT: --read-only, as during a failover
	errConnectionKilled = 1927 // ER_CONNECTION_KILLED (MariaDB)
	errReadOnlyTx       = 1792 // ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION
	errReadOnlyMode     = 1836 // ER_READ_ONLY_MODE

	// Refusals of a connection, with their reason: unavailability, whatever
	// the reason, as for any connection that could not be made.
	errDBAccessDenied = 1044 // ER_DBACCESS_DENIED_ERROR: no privilege on the database
	errAccessDenied   = 1045 // ER_ACCESS_DENIED_ERROR: user or password refused
	errBadDB          = 1049 // ER_BAD_DB_ERROR: no such database

	errNoSuchTable = 1146 // ER_NO_SUCH_TABLE
	errBadField    = 1054 // ER_BAD_FIELD_ERROR: no such column

	errTableAccessDenied  = 1142 // ER_TABLEACCESS_DENIED_ERROR: no privilege on the table
	errColumnAccessDenied = 1143 // ER_COLUMNACCESS_DENIED_ERROR
)

type engine struct{ dialect inboxsql.Dialect }

func (e engine) Dialect() inboxsql.Dialect { return e.dialect }

func (engine) Classify(err error) inboxdriver.ErrorClass {
	if n, ok := errorNumber(err); ok {
		switch n {
		case errDeadlock, errRecordChanged:
			return inboxdriver.ClassConflict
		case errLockWaitTimeout:
			return inboxdriver.ClassLockTimeout
		case errTooManyConns, errShutdown, errReadOnly, errConnectionKilled, errReadOnlyTx, errReadOnlyMode,
			errDBAccessDenied, errAccessDenied, errBadDB:
			return inboxdriver.ClassUnavailable
		case errTableAccessDenied, errColumnAccessDenied:
			return inboxdriver.ClassDenied
		case errNoSuchTable, errBadField:
			return inboxdriver.ClassNotMigrated
		}
		return inboxdriver.ClassOther
	}
	if errors.Is(err, mysql.ErrInvalidConn) {
		return inboxdriver.ClassUnavailable
	}
	return inboxdriver.ClassOther
}

func (engine) DuplicateKey(err error) bool {
	n, ok := errorNumber(err)
	return ok && n == errDuplicateKey
}

func errorNumber(err error) (uint16, bool) {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number, true
	}
	return 0, false
}
