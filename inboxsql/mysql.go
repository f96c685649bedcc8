package inboxsql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"
)

// MySQL and MariaDB server error numbers this package tells apart.
const (
	mysqlDuplicateKey     = 1062 // ER_DUP_ENTRY
	mysqlLockWaitTimeout  = 1205 // ER_LOCK_WAIT_TIMEOUT
	mysqlDeadlock         = 1213 // ER_LOCK_DEADLOCK
	mysqlRecordChanged    = 1020 // ER_CHECKREAD: a snapshot-isolation write conflict
	mysqlTooManyConns     = 1040 // ER_CON_COUNT_ERROR
	mysqlShutdown         = 1053 // ER_SERVER_SHUTDOWN
	mysqlReadOnly         = 1290 // ER_OPTION_PREVENTS_STATEMENT: --read-only, as during a failover
	mysqlConnectionKilled = 1927 // ER_CONNECTION_KILLED (MariaDB)
)

func mysqlErrorNumber(err error) (uint16, bool) {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number, true
	}
	return 0, false
}

func isDuplicateKey(err error) bool {
	n, ok := mysqlErrorNumber(err)
	return ok && n == mysqlDuplicateKey
}

// lockWaitSeconds converts a lock timeout to innodb_lock_wait_timeout,
// which counts whole seconds: rounded up, at least one.
func lockWaitSeconds(d time.Duration) int64 {
	return max(int64((d+time.Second-1)/time.Second), 1)
}

// mariaDBLockWait returns the SET STATEMENT prefix that bounds the lock
// wait of one statement, or "" for no bound.
func mariaDBLockWait(timeout time.Duration) string {
	if timeout <= 0 {
		return ""
	}
	return fmt.Sprintf("SET STATEMENT innodb_lock_wait_timeout = %d FOR ", lockWaitSeconds(timeout))
}

// withMySQLLockWait runs fn with the session's innodb_lock_wait_timeout set
// to timeout, and restores it, even when fn fails: the setting belongs to
// the connection and would outlive the transaction.
func withMySQLLockWait(ctx context.Context, tx *sql.Tx, timeout time.Duration, fn func() error) error {
	if timeout <= 0 {
		return fn()
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(
		"SET @inbox_saved_lock_wait_timeout = @@SESSION.innodb_lock_wait_timeout, SESSION innodb_lock_wait_timeout = %d",
		lockWaitSeconds(timeout))); err != nil {
		return err
	}
	err := fn()
	cctx, cancel := ctxWithoutCancel(ctx)
	defer cancel()
	if _, rerr := tx.ExecContext(cctx, "SET SESSION innodb_lock_wait_timeout = @inbox_saved_lock_wait_timeout"); rerr != nil && err == nil {
		err = fmt.Errorf("inboxsql: restore innodb_lock_wait_timeout: %w", rerr)
	}
	return err
}
