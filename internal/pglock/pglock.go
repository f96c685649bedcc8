// Package pglock holds the store-wide locks of the Postgres stores (the
// pgx store and the database/sql store over Postgres): the locks that pick
// one cleaner, one partition maintainer and one migrator.
//
// A lock is a transaction-scoped advisory lock (pg_try_advisory_xact_lock)
// taken in a transaction of its own, on a connection of its own, which
// stays open while the guarded work runs on other connections; ending that
// transaction releases the lock. Nothing outlives the transaction, so the
// lock is correct behind a transaction pooler (PgBouncer's
// pool_mode=transaction), which gives each transaction a server connection
// for its whole length and may give the next one another. A session lock
// (pg_advisory_lock … pg_advisory_unlock) is not: under transaction
// pooling the lock, the work and the unlock land on different server
// connections, and a lock can be left held by an idle server connection.
//
// A holder that dies cannot block others beyond a bound:
//   - a killed client closes its connection, which ends the transaction
//     (PgBouncer closes a server connection whose client left in a
//     transaction);
//   - a frozen or partitioned client stops its keepalive: the lock
//     transaction sets idle_in_transaction_session_timeout (IdleTimeout)
//     locally, so the server ends it IdleTimeout after the holder's last
//     keepalive. The holder runs a keepalive every IdleTimeout/3.
//
// The lock transaction takes no transaction ID and, at READ COMMITTED,
// holds no snapshot between its statements, so it does not hold back
// vacuum however long the work runs.
//
// Waiting (Options.Wait) polls with a backoff instead of blocking in the
// server: a blocked waiter would hold a server connection of the pooler
// for as long as it waits, and enough waiters would leave none for the
// holder's own work.
package pglock

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"
)

// IdleTimeout bounds how long a frozen or partitioned holder keeps its
// lock after its last keepalive: the lock transaction's
// idle_in_transaction_session_timeout.
const IdleTimeout = 30 * time.Second

const (
	// TryLock: $1 the lock's ID. One boolean: true when the lock is taken,
	// until the transaction ends.
	TryLock = `SELECT pg_try_advisory_xact_lock($1::bigint)`

	// Keepalive is the statement a holder runs to show it is alive.
	Keepalive = `SELECT 1`
)

// setIdleTimeout returns the statement that bounds the lock transaction's
// idle time.
func setIdleTimeout(d time.Duration) string {
	ms := d.Milliseconds()
	if ms < 1 {
		ms = 1
	}
	return `SET LOCAL idle_in_transaction_session_timeout = ` + strconv.FormatInt(ms, 10)
}

// ID hashes a lock's name to an advisory lock ID.
func ID(name string) int64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return int64(h.Sum64())
}

// Tx is a READ COMMITTED transaction on a connection of its own, which a
// driver begins.
type Tx interface {
	// Exec runs a statement without arguments.
	Exec(ctx context.Context, sql string) error
	// QueryBool runs a query whose one row holds one boolean.
	QueryBool(ctx context.Context, sql string, args ...any) (bool, error)
	// Rollback ends the transaction. A transaction that cannot end must
	// not leave its connection in a pool: Rollback closes it then.
	Rollback(ctx context.Context) error
}

// Options says how to hold a lock.
type Options struct {
	// Name names the lock; its ID is ID(Name).
	Name string
	// Wait waits for the lock (polling) instead of giving up when it is
	// taken.
	Wait bool
	// IdleTimeout is the bound on a frozen holder. Defaults to
	// IdleTimeout.
	IdleTimeout time.Duration
}

// ErrLost is returned, joined to the work's own error, when the lock
// transaction ended while the work ran: the lock was no longer held.
var ErrLost = errors.New("the lock's transaction ended while the work ran")

// Hold runs fn while holding the lock, in a transaction begun by begin.
// ran is false, and fn is not called, when the lock is taken and o.Wait is
// false. fn's context is cancelled if the lock is lost.
func Hold(ctx context.Context, begin func(ctx context.Context) (Tx, error), o Options, fn func(ctx context.Context) error) (ran bool, err error) {
	idle := o.IdleTimeout
	if idle <= 0 {
		idle = IdleTimeout
	}
	id := ID(o.Name)
	var tx Tx
	backoff := 20 * time.Millisecond
	for {
		tx, err = begin(ctx)
		if err != nil {
			return false, err
		}
		ok, err := take(ctx, tx, id, idle)
		if err != nil {
			rollback(ctx, tx)
			return false, err
		}
		if ok {
			break
		}
		rollback(ctx, tx)
		if !o.Wait {
			return false, nil
		}
		// Jittered, so that waiters that lost together do not retry
		// together.
		t := time.NewTimer(backoff/2 + rand.N(backoff/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return false, fmt.Errorf("wait for lock %q: %w", o.Name, ctx.Err())
		case <-t.C:
		}
		backoff = min(2*backoff, time.Second)
	}

	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var lost error
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(idle / 3)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			kctx, kcancel := context.WithTimeout(context.WithoutCancel(ctx), idle/3)
			err := tx.Exec(kctx, Keepalive)
			kcancel()
			if err != nil {
				lost = fmt.Errorf("lock %q: %w: %w", o.Name, ErrLost, err)
				cancel(lost)
				return
			}
		}
	}()
	err = fn(fctx)
	close(stop)
	wg.Wait()
	rollback(ctx, tx)
	return true, errors.Join(err, lost)
}

// take bounds the transaction's idle time and tries the lock in it.
func take(ctx context.Context, tx Tx, id int64, idle time.Duration) (bool, error) {
	if err := tx.Exec(ctx, setIdleTimeout(idle)); err != nil {
		return false, err
	}
	return tx.QueryBool(ctx, TryLock, id)
}

// rollback ends tx even when ctx has ended.
func rollback(ctx context.Context, tx Tx) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = tx.Rollback(rctx)
}
