package inboxsql

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// The lock-timeout bracket of a Postgres claim. The saved value lives in a
// transaction-local custom setting, so the restore is exact even inside a
// caller's transaction that set its own lock_timeout, and the bound applies
// to the claim and not to the handler.
const (
	setLockTimeout     = `SELECT set_config('inbox.saved_lock_timeout', current_setting('lock_timeout'), true), set_config('lock_timeout', $1, true)`
	restoreLockTimeout = `SELECT set_config('lock_timeout', current_setting('inbox.saved_lock_timeout'), true)`
)

func setPostgresLockTimeout(ctx context.Context, tx *sql.Tx, timeout time.Duration) error {
	_, err := tx.ExecContext(ctx, setLockTimeout, fmt.Sprintf("%dms", max(timeout.Milliseconds(), 1)))
	return err
}

func restorePostgresLockTimeout(ctx context.Context, tx *sql.Tx) error {
	_, err := tx.ExecContext(ctx, restoreLockTimeout)
	return err
}
