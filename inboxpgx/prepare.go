package inboxpgx

import (
	"context"
	"errors"
	"fmt"
	"strconv"
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
	// Inside a transaction (ClaimTx) the setting is the transaction's,
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

// bracket bounds a claim's lock wait on one connection, outside any
// transaction of the caller's. The driver remembers each connection's
// session lock_timeout (read once, in its CustomData): when it is already
// the claim's, as on a pool whose sessions are given the client's
// LockTimeout (pgxpool.Config.ConnConfig.RuntimeParams["lock_timeout"]),
// the claim needs no statement around it; otherwise SET LOCAL bounds the
// claim and then gives the handler the session's value back. A handler
// that changes the session's lock_timeout (SET without LOCAL) leaves that
// record stale: use SET LOCAL.
type bracket struct {
	set, restore string // empty when the session's value is the claim's
	timeout      time.Duration
}

// sessionLockTimeoutKey keys a connection's session lock_timeout, in
// milliseconds, in its CustomData.
const sessionLockTimeoutKey = "inbox.session_lock_timeout"

func (d *Driver) bracket(ctx context.Context, conn *pgx.Conn, timeout time.Duration) (bracket, error) {
	want := int64(0)
	if timeout > 0 {
		want = max(timeout.Milliseconds(), 1)
	}
	data := conn.PgConn().CustomData()
	session, ok := data[sessionLockTimeoutKey].(int64)
	if !ok {
		if err := conn.QueryRow(ctx, `SELECT setting::bigint FROM pg_settings WHERE name = 'lock_timeout'`).Scan(&session); err != nil {
			return bracket{}, err
		}
		data[sessionLockTimeoutKey] = session
	}
	if session == want {
		return bracket{}, nil
	}
	return bracket{
		set:     "SET LOCAL lock_timeout = " + strconv.FormatInt(want, 10),
		restore: "SET LOCAL lock_timeout = " + strconv.FormatInt(session, 10),
		timeout: timeout,
	}, nil
}

// queue queues the claim that claim queues, between the bracket's
// statements, if any. claim receives the options to queue the claim
// with: a boundedPrepare, so that a first prepare of the claim on the
// connection is bounded too. It returns the restore, or nil.
func (k bracket) queue(b *pgx.Batch, claim func(b *pgx.Batch, opts ...any) *pgx.QueuedQuery) (restore *pgx.QueuedQuery) {
	if k.set == "" {
		claim(b)
		return nil
	}
	b.Queue(k.set)
	if k.timeout > 0 {
		claim(b, boundedPrepare{timeout: k.timeout})
	} else {
		claim(b)
	}
	return b.Queue(k.restore)
}
