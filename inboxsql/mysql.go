package inboxsql

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

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
