package inboxpgx

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultCommitTimeout is the default Config.CommitTimeout.
const DefaultCommitTimeout = 30 * time.Second

// ErrCommitTimeout is returned, wrapped, by Driver.Commit (and by Commit of
// the transactions the driver begins) when a COMMIT had no reply within
// Config.CommitTimeout, and the driver stopped waiting for it: whether the
// transaction commits is unknown. Most often the primary waits for a
// synchronous standby that is gone. Classify calls it
// inboxdriver.ClassUnavailable: the client returns it as inbox.ErrUnavailable
// at inbox.StageCommit, a store failure that is neither acked nor
// dead-lettered, and the redelivery finds out what happened.
var ErrCommitTimeout = errors.New("inboxpgx: commit outcome unknown")

// awaitCommit runs commit, the statements of a transaction up to and
// including its COMMIT, on conn, and waits for it: until it returns, for
// timeout at most (a timeout that is not positive never ends the wait), or
// until ctx ends. commit runs with ctx's values but not its end.
//
// When the wait ends first, awaitCommit abandons the commit, and reports
// that it did: commit goes on, on conn, which it takes from its pool
// (Hijack), and conn is closed once commit returns. The caller must not
// touch conn again. The COMMIT is never cancelled: a backend that waits in
// COMMIT for a synchronous standby and gets a cancel request stops waiting
// and lets the commit be seen on the primary alone, where a redelivery
// would find it a Duplicate and ack it, and a failover would lose it. pgx
// sends a cancel request whenever a query's read fails, whether its
// context ended (with any ContextWatcherHandler) or its socket was closed
// under it: so the commit is left to wait, in the background. The backend
// keeps its locks meanwhile: the redelivery's claim waits on the row and
// times out (inbox.ErrLockTimeout) until the standby confirms the commit
// (the redelivery is then a Duplicate) or a failover ends the primary (it
// is then applied on the new one).
func awaitCommit(ctx context.Context, conn *pgxpool.Conn, timeout time.Duration, commit func(ctx context.Context) error) (err error, abandoned bool) {
	if timeout <= 0 && ctx.Done() == nil {
		return commit(ctx), false
	}
	done := make(chan error, 1)
	go func() { done <- commit(context.WithoutCancel(ctx)) }()
	var expired <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
	select {
	case err := <-done:
		return err, false
	case <-expired:
		err = fmt.Errorf("%w: no reply to COMMIT after %s (Config.CommitTimeout), as when the primary waits for a synchronous standby that is gone; "+
			"the commit was left to finish, never cancelled", ErrCommitTimeout, timeout)
	case <-ctx.Done():
		err = fmt.Errorf("inboxpgx: commit outcome unknown: %w; the commit was left to finish, never cancelled", context.Cause(ctx))
	}
	select {
	case err := <-done: // it returned meanwhile
		return err, false
	default:
	}
	pc := conn.Hijack()
	go func() {
		<-done
		cctx, cancel := cleanupContext(ctx)
		defer cancel()
		_ = pc.Close(cctx)
	}()
	return err, true
}

// Commit commits the transaction, bounded by commitTimeout (awaitCommit),
// and hands the connection back to the pool.
func (t *poolTx) Commit(ctx context.Context) error {
	if t.abandoned {
		return pgx.ErrTxClosed // its connection is the abandoned commit's
	}
	if t.conn == nil || ctx.Err() != nil {
		// Ended (pgx.ErrTxClosed), or a context that ended already: pgx
		// sends nothing.
		err := t.Tx.Commit(ctx)
		t.release()
		return err
	}
	err, abandoned := awaitCommit(ctx, t.conn, t.commitTimeout, t.Tx.Commit)
	t.abandoned = abandoned
	t.release() // a no-op after Hijack
	return err
}
