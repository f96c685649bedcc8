package inboxpgx

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// boundedPrepare is the pgx.QueryRewriter of a claim queued with a lock
// timeout. In its default mode (QueryExecModeCacheStatement) pgx prepares a
// statement the first time a connection sends it, in a round trip of its
// own before the batch: before the statement that bounds the claim's lock
// wait has run. Preparing the claim takes a lock on the inbox table, so on a
// fresh connection a claim behind a table lock (a migration, a VACUUM FULL,
// an operator's LOCK TABLE) waited for the whole lock, however short the
// LockTimeout.
//
// Before pgx sees the batch, the rewriter prepares the claim on a
// connection that has not yet, with lock_timeout set around the prepare,
// and names the statement after its SQL, which pgx then uses instead of
// preparing its own. That costs three more round trips once per connection
// and statement. In the other modes pgx names no statement, and the
// rewriter does nothing: with QueryExecModeExec and the simple protocol the
// claim is parsed after the lock timeout is set, and with the two describe
// modes the first describe of the claim on a connection is not bounded.
type boundedPrepare struct {
	timeout time.Duration
}

// RewriteQuery implements pgx.QueryRewriter. It leaves sql and args as they
// are.
func (b boundedPrepare) RewriteQuery(ctx context.Context, conn *pgx.Conn, sql string, args []any) (string, []any, error) {
	if err := prepareBounded(ctx, conn, sql, b.timeout); err != nil {
		return "", nil, err
	}
	return sql, args, nil
}

// prepareBounded prepares sql on conn, named after itself as pgx names the
// statements it is given to prepare, with its lock wait bounded by timeout.
func prepareBounded(ctx context.Context, conn *pgx.Conn, sql string, timeout time.Duration) error {
	// The connection's CustomData remembers, per statement, whether the
	// driver prepared it (true) or pgx prepares nothing in this mode.
	data := conn.PgConn().CustomData()
	key := "inbox.prepared:" + sql
	switch data[key] {
	case true:
		// Free when pgx holds the statement; prepared again, unbounded,
		// only if the connection deallocated it since.
		_, err := conn.Prepare(ctx, sql, sql)
		return err
	case false: // another mode: pgx prepares nothing of its own
		return nil
	}
	if conn.Config().DefaultQueryExecMode != pgx.QueryExecModeCacheStatement {
		data[key] = false
		return nil
	}
	// Inside a transaction (ProcessTx) the setting is the transaction's,
	// and a failed prepare aborts it, which undoes the setting; outside one
	// it is the session's, and restored whatever happens.
	local := conn.PgConn().TxStatus() != 'I'
	ms := max(timeout.Milliseconds(), 1)
	if _, err := conn.Exec(ctx, setLockTimeoutScoped, fmt.Sprintf("%dms", ms), local); err != nil {
		return err
	}
	_, err := conn.Prepare(ctx, sql, sql)
	if err == nil || !local {
		rctx, cancel := cleanupContext(ctx)
		defer cancel()
		if _, rerr := conn.Exec(rctx, restoreLockTimeoutScoped, local); rerr != nil {
			// A connection left with the claim's lock_timeout must not
			// serve other queries.
			_ = conn.Close(rctx)
			return errors.Join(err, fmt.Errorf("inboxpgx: restore lock_timeout after preparing the claim: %w", rerr))
		}
	}
	if err != nil {
		return err
	}
	data[key] = true
	return nil
}

// The lock-timeout bracket of prepareBounded, for the session ($2 false)
// or the transaction ($2 true): setLockTimeout and restoreLockTimeout with
// the scope as a parameter.
const (
	setLockTimeoutScoped = `SELECT set_config('lock_timeout',
    $1::text || left(set_config('inbox.saved_lock_timeout', current_setting('lock_timeout'), $2), 0), $2)`
	restoreLockTimeoutScoped = `SELECT set_config('lock_timeout', current_setting('inbox.saved_lock_timeout'), $1)`
)
