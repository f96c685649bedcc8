package inboxsql_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxsql"
	"github.com/txinbox/inbox/inboxsql/inboxsqlite"
	"github.com/txinbox/inbox/inboxtest"
	"github.com/txinbox/inbox/internal/testdb"
)

func batchParams(ids []string, lockTimeout time.Duration) *inboxdriver.ClaimParams {
	return &inboxdriver.ClaimParams{Consumer: "billing", IDs: ids, LockTimeout: lockTimeout}
}

// claimOne begins a transaction and claims id alone for "billing".
func claimOne(ctx context.Context, d inboxdriver.Driver[*sql.Tx], id string, lockTimeout time.Duration) (*sql.Tx, bool, error) {
	tx, claimed, err := d.BeginClaim(ctx, batchParams([]string{id}, lockTimeout))
	if err != nil {
		return nil, false, err
	}
	return tx, claimed[0], nil
}

// awaitWaiting polls waiting until it counts a waiting claim.
func awaitWaiting(t *testing.T, waiting func(ctx context.Context) (int, error)) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, err := waiting(context.Background())
		require.NoError(t, err)
		if n > 0 {
			return
		}
		require.False(t, time.Now().After(deadline), "the batch claim never waited for the in-flight claim")
		time.Sleep(5 * time.Millisecond)
	}
}

// A batch that holds an id whose claim is in flight in another
// transaction waits for it, then reports exactly the ids that were new:
// the in-flight one is a duplicate if that transaction commits, and new if
// it rolls back.
func TestBatchWaitsForInFlightClaim(t *testing.T) {
	for _, e := range engines {
		for _, commit := range []bool{true, false} {
			name := e.name + "/rollback"
			if commit {
				name = e.name + "/commit"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				d, tables := e.newDriver(t)
				ctx := context.Background()
				inflight, other, dup := inboxtest.NewID(), inboxtest.NewID(), inboxtest.NewID()
				tx, ok, err := claimOne(ctx, d, dup, 0)
				require.NoError(t, err)
				require.True(t, ok)
				require.NoError(t, d.Commit(ctx, tx))

				first, ok, err := claimOne(ctx, d, inflight, 0)
				require.NoError(t, err)
				require.True(t, ok)
				type result struct {
					claimed []bool
					err     error
				}
				done := make(chan result, 1)
				go func() {
					tx, claimed, err := d.BeginClaim(ctx, batchParams([]string{other, inflight, dup}, 0))
					if err == nil {
						err = d.Commit(ctx, tx)
					}
					done <- result{claimed, err}
				}()
				if e.waiting != nil {
					awaitWaiting(t, e.waiting(t, d.DB(), tables))
				}
				if commit {
					require.NoError(t, d.Commit(ctx, first))
				} else {
					require.NoError(t, d.Rollback(ctx, first))
				}
				r := <-done
				require.NoError(t, r.err)
				require.Equal(t, []bool{true, !commit, false}, r.claimed)
			})
		}
	}
}

// A batch claim past LockTimeout behind an in-flight claim fails with a
// lock timeout, and leaves nothing claimed.
func TestBatchLockTimeout(t *testing.T) {
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			d, _ := e.newDriver(t)
			ctx := context.Background()
			inflight, other := inboxtest.NewID(), inboxtest.NewID()
			first, ok, err := claimOne(ctx, d, inflight, 0)
			require.NoError(t, err)
			require.True(t, ok)
			_, _, err = d.BeginClaim(ctx, batchParams([]string{other, inflight}, 50*time.Millisecond))
			require.Error(t, err)
			require.Equal(t, inboxdriver.ClassLockTimeout, d.Classify(err), "%v", err)
			require.NoError(t, d.Rollback(ctx, first))

			tx, claimed, err := d.BeginClaim(ctx, batchParams([]string{other, inflight}, 0))
			require.NoError(t, err)
			require.Equal(t, []bool{true, true}, claimed, "the timed-out batch claimed nothing")
			require.NoError(t, d.Rollback(ctx, tx))
		})
	}
}

// The lock-wait bound is the claim's alone: the connection's own setting
// is back once the claim is done, whether it succeeded or timed out.
func TestLockTimeoutIsRestored(t *testing.T) {
	for _, e := range engines {
		if e.dialect == inboxsql.Postgres {
			continue // lock_timeout is set transaction-locally, as in inboxpgx.
		}
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			d, _ := e.newDriver(t)
			ctx := context.Background()
			db := d.DB()
			// One connection: the one that claimed is the one inspected.
			db.SetMaxOpenConns(1)
			setting := func() int64 {
				var n int64
				q := `SELECT @@SESSION.innodb_lock_wait_timeout`
				if e.dialect == inboxsql.SQLite {
					q = `PRAGMA busy_timeout`
				}
				require.NoError(t, db.QueryRowContext(ctx, q).Scan(&n))
				return n
			}
			before := setting()

			tx, ok, err := claimOne(ctx, d, inboxtest.NewID(), 2*time.Second)
			require.NoError(t, err)
			require.True(t, ok)
			require.NoError(t, d.Commit(ctx, tx))
			require.Equal(t, before, setting(), "after a claim")

			// Another pool holds the lock the next claim waits for.
			other := otherPool(t, e, d)
			id := inboxtest.NewID()
			holder, err := other.BeginTx(ctx, nil)
			require.NoError(t, err)
			defer holder.Rollback()
			od, err := inboxsql.New(other, engineOf(e.dialect), &inboxsql.Config{Tables: d.Tables()})
			require.NoError(t, err)
			claimed, err := od.Claim(ctx, holder, batchParams([]string{id}, 0))
			require.NoError(t, err)
			require.True(t, claimed[0])

			_, _, err = claimOne(ctx, d, id, 50*time.Millisecond)
			require.Error(t, err)
			require.Equal(t, inboxdriver.ClassLockTimeout, d.Classify(err), "%v", err)
			require.Equal(t, before, setting(), "after a lock timeout")
		})
	}
}

// otherPool opens a second pool on the database of d.
func otherPool(t *testing.T, e engine, d *inboxsql.Driver) *sql.DB {
	t.Helper()
	var path string
	if e.dialect == inboxsql.SQLite {
		require.NoError(t, d.DB().QueryRow(`SELECT file FROM pragma_database_list WHERE name = 'main'`).Scan(&path))
		db, err := inboxsqlite.Open(path)
		require.NoError(t, err)
		t.Cleanup(func() { db.Close() })
		return db
	}
	var name string
	require.NoError(t, d.DB().QueryRow(`SELECT DATABASE()`).Scan(&name))
	db, err := sql.Open("mysql", testdb.MySQLDSN(t, name))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

// The id column is CHAR(36) ASCII (the uuid schema), and the driver is
// told it holds text, so that it passes ids the column cannot hold as
// they are. On MySQL and MariaDB no claim may then store, or skip for, a
// truncated or converted id: it must fail, and leave nothing claimed.
func TestMySQLClaimNeverStoresAnotherID(t *testing.T) {
	for _, e := range engines {
		if e.dialect != inboxsql.MariaDB && e.dialect != inboxsql.MySQL {
			continue
		}
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			d, tables := e.newDriver(t)
			tables.IDType = inboxdriver.IDTypeText
			text, err := inboxsql.New(d.DB(), engineOf(e.dialect), &inboxsql.Config{Tables: tables})
			require.NoError(t, err)
			ctx := context.Background()

			// Its first 36 characters are an id that is already claimed.
			claimed := inboxtest.NewID()
			tx, ok, err := claimOne(ctx, d, claimed, 0)
			require.NoError(t, err)
			require.True(t, ok)
			require.NoError(t, d.Commit(ctx, tx))
			fresh := inboxtest.NewID()

			for _, bad := range []string{
				inboxtest.NewID() + "-and-more", // truncated to a new id
				claimed + "-and-more",           // truncated to a claimed id
				"é" + inboxtest.NewID()[1:],     // not ASCII
			} {
				tx, _, err := claimOne(ctx, text, bad, time.Second)
				if err == nil {
					_ = text.Rollback(ctx, tx) // so that the failure leaves no lock behind
				}
				require.Error(t, err, "single claim of %q", bad)
				tx, _, err = text.BeginClaim(ctx, batchParams([]string{fresh, bad}, time.Second))
				if err == nil {
					_ = text.Rollback(ctx, tx)
				}
				require.Error(t, err, "batch claim of %q", bad)
				require.Equal(t, inboxdriver.ClassOther, text.Classify(err))
			}
			var n int
			require.NoError(t, d.DB().QueryRowContext(ctx, `SELECT count(*) FROM `+d.Tables().Qualify(inboxdriver.DialectMySQL, "inbox")).Scan(&n))
			require.Equal(t, 1, n, "only the first claim is stored")

			// The same driver still claims good ids in a batch with a
			// duplicate.
			tx, got, err := text.BeginClaim(ctx, batchParams([]string{fresh, claimed}, time.Second))
			require.NoError(t, err)
			require.Equal(t, []bool{true, false}, got)
			require.NoError(t, text.Commit(ctx, tx))
		})
	}
}

// A batch larger than one MariaDB statement is claimed in several, with
// duplicates among them.
func TestLargeBatch(t *testing.T) {
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			d, _ := e.newDriver(t)
			ctx := context.Background()
			ids := make([]string, 1203)
			for i := range ids {
				ids[i] = inboxtest.NewID()
			}
			tx, got, err := d.BeginClaim(ctx, batchParams(ids[600:700], 0))
			require.NoError(t, err)
			require.NoError(t, d.Commit(ctx, tx))
			require.Equal(t, 100, count(got))

			tx, got, err = d.BeginClaim(ctx, batchParams(ids, 0))
			require.NoError(t, err)
			require.NoError(t, d.Commit(ctx, tx))
			require.Equal(t, len(ids)-100, count(got))
			for i := 600; i < 700; i++ {
				require.False(t, got[i], "id %d was claimed before", i)
			}
		})
	}
}

func count(bs []bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

func TestNewRejectsBadInput(t *testing.T) {
	db := sqliteDB(t)
	_, err := inboxsql.New(nil, engineOf(inboxsql.SQLite), nil)
	require.ErrorContains(t, err, "db is nil")
	_, err = inboxsql.New(db, engineOf("oracle"), nil)
	require.ErrorContains(t, err, `unknown dialect "oracle"`)
	_, err = inboxsql.New(db, engineOf(inboxsql.SQLite), &inboxsql.Config{Tables: inboxdriver.Tables{Schema: "x"}})
	require.ErrorContains(t, err, "Tables.Schema")
	_, err = inboxsql.New(db, engineOf(inboxsql.MySQL), &inboxsql.Config{Tables: inboxdriver.Tables{Inbox: strings.Repeat("i", 64)}})
	require.ErrorContains(t, err, "Tables.Inbox")
}
