package inboxpgx_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/internal/pglock"
	"github.com/txinbox/inbox/internal/testdb"
)

// lockTargets are the ways to reach the test server that the locks must
// be correct through: directly, and through PgBouncer in each pool mode.
var lockTargets = []string{"direct", testdb.PoolTransaction, testdb.PoolSession}

// targetPool returns a pool of the test's own to the test server through
// target, in an exec mode that works behind a transaction pooler.
func targetPool(t *testing.T, target string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	u := testdb.URL(t)
	if target != "direct" {
		u = testdb.PgBouncer(t, target)
	}
	cfg, err := pgxpool.ParseConfig(u)
	require.NoError(t, err)
	cfg.MaxConns = maxConns
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// lockDriver returns a driver over pool whose tables are in a schema of
// the test's own (the locks are named after it).
func lockDriver(t *testing.T, pool *pgxpool.Pool, idle time.Duration) *inboxpgx.Driver {
	t.Helper()
	d, err := inboxpgx.New(pool, &inboxpgx.Config{Tables: inboxdriver.Tables{Schema: testdb.Schema(t)}, LockIdleTimeout: idle})
	require.NoError(t, err)
	return d
}

// advisoryHolders returns the backends that hold the advisory lock id in
// the current database, asked directly of the server.
func advisoryHolders(t *testing.T, id int64) []int32 {
	t.Helper()
	rows, err := testPool(t).Query(context.Background(), `SELECT pid FROM pg_locks
  WHERE locktype = 'advisory' AND granted AND objsubid = 1
    AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
    AND ((classid::bigint << 32) | objid::bigint) = $1`, id)
	require.NoError(t, err)
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	require.NoError(t, err)
	return pids
}

// TestLockExcludes: holders of WithLock and of WithMigrationLock never
// overlap, directly and through PgBouncer, and no advisory lock is left
// held afterwards.
func TestLockExcludes(t *testing.T) {
	t.Parallel()
	for _, target := range lockTargets {
		t.Run(target, func(t *testing.T) {
			t.Parallel()
			pool := targetPool(t, target, testdb.PgBouncerPoolSize)
			d := lockDriver(t, pool, 0)
			key := "inbox-test:" + testdb.RandomSuffix()
			ctx := context.Background()
			var overlaps, entries, skipped, migrations atomic.Int64
			// Each lock has its own count of holders inside.
			work := func(ctx context.Context, inside *atomic.Int64) error {
				if inside.Add(1) > 1 {
					overlaps.Add(1)
				}
				defer inside.Add(-1)
				// Work on another connection, as the guarded sections do.
				_, err := pool.Exec(ctx, `SELECT pg_sleep(0.002)`)
				return err
			}
			var insideLock, insideMigration atomic.Int64
			const workers, rounds = 4, 40
			var wg sync.WaitGroup
			errs := make(chan error, 2*workers)
			for range workers {
				wg.Add(2)
				go func() {
					defer wg.Done()
					for range rounds {
						ran, err := d.WithLock(ctx, key, func(ctx context.Context) error {
							entries.Add(1)
							return work(ctx, &insideLock)
						})
						if err != nil {
							errs <- err
							return
						}
						if !ran {
							skipped.Add(1)
						}
					}
				}()
				go func() {
					defer wg.Done()
					for range rounds / 4 {
						if err := d.WithMigrationLock(ctx, func(ctx context.Context) error {
							migrations.Add(1)
							return work(ctx, &insideMigration)
						}); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			t.Logf("%s: %d entries, %d skipped, %d migrations", target, entries.Load(), skipped.Load(), migrations.Load())
			require.Positive(t, entries.Load())
			require.Equal(t, int64(workers*rounds/4), migrations.Load(), "every migrator waits its turn")
			require.Zero(t, overlaps.Load(), "holders overlapped")
			tables := d.Tables()
			require.Empty(t, advisoryHolders(t, pglock.ID(key)))
			require.Empty(t, advisoryHolders(t, pglock.ID("inbox-migrate:"+tables.Schema+"."+tables.Migrations)))
		})
	}
}

// TestLockHolderTerminated: when the holder's server connection is
// terminated, the holder learns that it lost the lock, and the next
// acquirer takes it.
func TestLockHolderTerminated(t *testing.T) {
	t.Parallel()
	for _, target := range lockTargets {
		t.Run(target, func(t *testing.T) {
			t.Parallel()
			pool := targetPool(t, target, 4)
			d := lockDriver(t, pool, 3*time.Second)
			key := "inbox-test:" + testdb.RandomSuffix()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			held := make(chan struct{})
			done := make(chan error, 1)
			go func() {
				_, err := d.WithLock(ctx, key, func(ctx context.Context) error {
					close(held)
					<-ctx.Done() // until the lock is lost
					return nil
				})
				done <- err
			}()
			<-held
			pids := advisoryHolders(t, pglock.ID(key))
			require.Len(t, pids, 1)
			var ok bool
			require.NoError(t, testPool(t).QueryRow(ctx, `SELECT pg_terminate_backend($1, 10000)`, pids[0]).Scan(&ok))
			require.True(t, ok)

			ran, err := d.WithLock(ctx, key, func(context.Context) error { return nil })
			require.NoError(t, err)
			require.True(t, ran, "the lock of a terminated holder was not released")
			err = <-done
			require.ErrorIs(t, err, pglock.ErrLost)
		})
	}
}

// TestLockHolderClosed: a holder whose client connection closes in the
// middle of its lock transaction (a killed process) leaves the lock free.
func TestLockHolderClosed(t *testing.T) {
	t.Parallel()
	for _, target := range lockTargets {
		t.Run(target, func(t *testing.T) {
			t.Parallel()
			pool := targetPool(t, target, 4)
			d := lockDriver(t, pool, 0)
			key := "inbox-test:" + testdb.RandomSuffix()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig)
			require.NoError(t, err)
			tx, err := conn.Begin(ctx)
			require.NoError(t, err)
			var ok bool
			require.NoError(t, tx.QueryRow(ctx, pglock.TryLock, pglock.ID(key)).Scan(&ok))
			require.True(t, ok)
			ran, err := d.WithLock(ctx, key, func(context.Context) error { return nil })
			require.NoError(t, err)
			require.False(t, ran, "the lock was not held")
			// The connection goes away without ending its transaction.
			require.NoError(t, conn.PgConn().Conn().Close())

			ran = waitLock(t, ctx, d, key)
			require.True(t, ran, "the lock of a closed holder was not released")
		})
	}
}

// TestLockHolderFrozen: a holder that stops talking in the middle of its
// lock transaction (a frozen process, a partition) loses the lock after
// LockIdleTimeout, to the server's idle_in_transaction_session_timeout.
func TestLockHolderFrozen(t *testing.T) {
	t.Parallel()
	for _, target := range lockTargets {
		t.Run(target, func(t *testing.T) {
			t.Parallel()
			pool := targetPool(t, target, 4)
			const idle = 2 * time.Second
			d := lockDriver(t, pool, idle)
			key := "inbox-test:" + testdb.RandomSuffix()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			thaw := make(chan struct{})
			defer close(thaw)
			held := make(chan struct{})
			go func() {
				// A holder whose keepalives never leave the process.
				begin := func(ctx context.Context) (pglock.Tx, error) {
					tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
					if err != nil {
						return nil, err
					}
					return frozenTx{tx, thaw}, nil
				}
				_, _ = pglock.Hold(ctx, begin, pglock.Options{Name: key, IdleTimeout: idle}, func(ctx context.Context) error {
					close(held)
					<-thaw
					return nil
				})
			}()
			<-held
			ran, err := d.WithLock(ctx, key, func(context.Context) error { return nil })
			require.NoError(t, err)
			require.False(t, ran, "the lock was not held")
			require.True(t, waitLock(t, ctx, d, key), "the lock of a frozen holder was not released")
		})
	}
}

// frozenTx is a lock transaction whose keepalives hang until thaw closes.
type frozenTx struct {
	tx   pgx.Tx
	thaw chan struct{}
}

func (f frozenTx) Exec(ctx context.Context, sql string) error {
	if sql == pglock.Keepalive {
		<-f.thaw
		return errors.New("frozen")
	}
	_, err := f.tx.Exec(ctx, sql)
	return err
}

func (f frozenTx) QueryBool(ctx context.Context, sql string, args ...any) (bool, error) {
	var b bool
	err := f.tx.QueryRow(ctx, sql, args...).Scan(&b)
	return b, err
}

func (f frozenTx) Rollback(ctx context.Context) error { return f.tx.Rollback(ctx) }

// waitLock tries the lock until it is free or ctx ends, and reports
// whether it ran.
func waitLock(t *testing.T, ctx context.Context, d *inboxpgx.Driver, key string) bool {
	t.Helper()
	for ctx.Err() == nil {
		ran, err := d.WithLock(ctx, key, func(context.Context) error { return nil })
		if ran {
			require.NoError(t, err)
			return true
		}
		if err != nil && ctx.Err() == nil {
			// A pooler may hand out the closed holder's server
			// connection once before it notices: try again.
			t.Logf("WithLock: %v", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	return false
}
