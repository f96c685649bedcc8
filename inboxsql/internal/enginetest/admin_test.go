package inboxsql_test

import (
	"bytes"
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxsql"
	"github.com/txinbox/inbox/inboxsql/inboxsqlite"
	"github.com/txinbox/inbox/inboxtest"
	"github.com/txinbox/inbox/inboxtype"
	"github.com/txinbox/inbox/internal/testdb"
)

func TestOpenSQLite(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, path := range []string{filepath.Join(dir, "a.db"), "file:" + filepath.Join(dir, "b.db") + "?cache=private"} {
		db, err := inboxsqlite.Open(path)
		require.NoError(t, err, path)
		var mode string
		var busy, sync int
		require.NoError(t, db.QueryRow(`PRAGMA journal_mode`).Scan(&mode))
		require.NoError(t, db.QueryRow(`PRAGMA busy_timeout`).Scan(&busy))
		require.NoError(t, db.QueryRow(`PRAGMA synchronous`).Scan(&sync))
		require.Equal(t, "wal", mode)
		require.Equal(t, int(inboxsql.DefaultSQLiteBusyTimeout.Milliseconds()), busy)
		require.Equal(t, 2, sync, "synchronous=FULL")
		db.Close()
	}
	for _, bad := range []string{"", ":memory:", "file::memory:", "file:x.db?mode=memory", filepath.Join(dir, "c?.db")} {
		_, err := inboxsqlite.Open(bad)
		require.Error(t, err, "%q", bad)
	}
	_, err := inboxsqlite.Open(filepath.Join(dir, "no", "such", "dir.db"))
	require.Error(t, err)
}

// OpenSQLite begins read-write transactions with BEGIN IMMEDIATE: a
// transaction holds the write lock from its start, so a second one cannot
// begin while the first is open, even before the first has written.
func TestOpenSQLiteBeginsImmediate(t *testing.T) {
	t.Parallel()
	db := sqliteDB(t)
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer tx.Rollback()
	// A connection that does not wait, so that the test does not time.
	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.ExecContext(ctx, `PRAGMA busy_timeout = 0`)
	require.NoError(t, err)
	_, busy := conn.ExecContext(ctx, `BEGIN IMMEDIATE`)
	require.Error(t, busy, "the write lock is free although a transaction began")
	d, err := inboxsql.New(db, engineOf(inboxsql.SQLite), nil)
	require.NoError(t, err)
	require.Equal(t, inboxdriver.ClassConflict, d.Classify(busy), "%v", busy)
}

func TestClassifyUnavailable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, c := range []struct {
		dialect inboxsql.Dialect
		open    func() (*sql.DB, error)
	}{
		{inboxsql.SQLite, func() (*sql.DB, error) {
			// A directory is not a database file.
			return sql.Open("sqlite", t.TempDir())
		}},
		{inboxsql.Postgres, func() (*sql.DB, error) {
			return sql.Open("pgx", "postgres://postgres@127.0.0.1:1/test?connect_timeout=5")
		}},
		{inboxsql.MariaDB, func() (*sql.DB, error) {
			return sql.Open("mysql", "root@tcp(127.0.0.1:1)/test?timeout=5s")
		}},
	} {
		db, err := c.open()
		require.NoError(t, err)
		d, err := inboxsql.New(db, engineOf(c.dialect), nil)
		require.NoError(t, err)
		_, _, err = claimOne(ctx, d, inboxtest.NewID(), time.Second)
		require.Error(t, err)
		require.Equal(t, inboxdriver.ClassUnavailable, d.Classify(err), "%s: %v", c.dialect, err)
		cl, err := inbox.NewClient(d, nil)
		require.NoError(t, err)
		_, err = cl.Admin().Stats(ctx)
		require.ErrorIs(t, err, inbox.ErrUnavailable, "%s", c.dialect)
		db.Close()
	}
	_ = stdlib.GetDefaultDriver() // the "pgx" driver is registered
}

// A dead letter keeps what the broker gave it even when a column type
// would refuse it: a long queue name, invalid UTF-8 and NUL bytes, a long
// record key. On MySQL a dedup key longer than its column is stored as a
// hash. Nothing may make a message impossible to dead-letter.
func TestDeadLetterOddValues(t *testing.T) {
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			d, _ := e.newDriver(t)
			c, err := inbox.NewClient(d, nil)
			require.NoError(t, err)
			ctx := context.Background()
			queue := strings.Repeat("q", 2000)
			key := bytes.Repeat([]byte{0, 0xff}, 5000)
			m := inbox.Message{Payload: []byte("\x00\xff"), Headers: map[string]string{"h": "\xff"},
				Source: inbox.Source{Transport: "kafka", Queue: queue, Partition: 1, Offset: 2, Key: key}}
			err = c.DeadLetter(ctx, inbox.DeadLetterParams{Consumer: "billing", Message: m,
				Err: inbox.Permanent(errString("bad \xff byte and a \x00 NUL")), Attempts: 1})
			require.NoError(t, err)
			list, err := c.Admin().DeadLetterList(ctx, inboxtype.DeadLetterListParams{Consumer: "billing", Limit: 10})
			require.NoError(t, err)
			require.Len(t, list, 1)
			got, err := c.Admin().DeadLetterGet(ctx, list[0].ID)
			require.NoError(t, err)
			require.Equal(t, queue, got.Queue)
			require.Equal(t, key, got.Key)
			require.Equal(t, m.Payload, got.Payload)
			require.Equal(t, inbox.ReasonPermanent, got.Reason)
			require.Contains(t, got.Error, "bad ")
			if e.dialect == inboxsql.MySQL || e.dialect == inboxsql.MariaDB {
				require.True(t, strings.HasPrefix(got.DedupKey, "sha256:"), got.DedupKey)
			} else {
				require.Equal(t, m.Source.String(), got.DedupKey)
			}

			// The same message again updates the row, with the same key.
			err = c.DeadLetter(ctx, inbox.DeadLetterParams{Consumer: "billing", Message: m, Err: errString("again"), Attempts: 2})
			require.NoError(t, err)
			list, err = c.Admin().DeadLetterList(ctx, inboxtype.DeadLetterListParams{Limit: 10})
			require.NoError(t, err)
			require.Len(t, list, 1)
			require.Equal(t, 2, list[0].Attempts)
		})
	}
}

type errString string

func (e errString) Error() string { return string(e) }

// Stats reports the table's size where the engine can tell.
func TestStatsTableBytes(t *testing.T) {
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			d, _ := e.newDriver(t)
			ctx := context.Background()
			ids := make([]string, 500)
			for i := range ids {
				ids[i] = inboxtest.NewID()
			}
			tx, _, err := d.BeginClaim(ctx, &inboxdriver.ClaimParams{Consumer: "billing", IDs: ids})
			require.NoError(t, err)
			require.NoError(t, d.Commit(ctx, tx))
			st, err := d.Stats(ctx)
			require.NoError(t, err)
			require.Len(t, st.Consumers, 1)
			require.Equal(t, int64(500), st.Consumers[0].Rows)
			// The database's clock stamped the rows: the same machine's.
			requireNear(t, st.Consumers[0].Oldest, time.Now())
			require.Greater(t, st.TableBytes, int64(0))
			if e.dialect == inboxsql.SQLite || e.dialect == inboxsql.Postgres {
				// Exact sizes: 500 rows of two ids take more than 8 KiB.
				require.Greater(t, st.TableBytes, int64(8<<10))
			}
		})
	}
}

// requireNear fails unless got is within an hour of want: a time the
// database stamped, read back through a connection whose time zone
// settings would shift it by hours if they were applied.
func requireNear(t *testing.T, got, want time.Time) {
	t.Helper()
	require.True(t, got.Sub(want).Abs() < time.Hour, "time %v, want about %v", got, want)
}

// MySQL times do not move with the DSN's parseTime and loc, nor with the
// session's time_zone: they are written and read as UTC, and the purge's
// cutoff too.
func TestMySQLTimesIgnoreTimeZones(t *testing.T) {
	t.Parallel()
	e := engineNamed(t, "mariadb")
	d, _ := e.newDriver(t)
	var name string
	require.NoError(t, d.DB().QueryRow(`SELECT DATABASE()`).Scan(&name))
	ctx := context.Background()
	when := time.Date(2024, 1, 2, 3, 4, 5, 123456000, time.UTC)
	for i, params := range []string{"", "parseTime=true&loc=Asia%2FTokyo", "time_zone=%27-07%3A00%27", "parseTime=true&loc=Local"} {
		dsn := testdb.MySQLDSN(t, name)
		sep := "?"
		if strings.Contains(dsn, "?") {
			sep = "&"
		}
		db, err := sql.Open("mysql", dsn+sep+params)
		require.NoError(t, err)
		defer db.Close()
		dd, err := inboxsql.New(db, engineOf(inboxsql.MariaDB), nil)
		require.NoError(t, err)
		consumer := "c" + string(rune('0'+i))
		id := inboxtest.NewID()
		tx, ok, err := dd.BeginClaim(ctx, &inboxdriver.ClaimParams{Consumer: consumer, IDs: []string{id}})
		require.NoError(t, err, params)
		require.True(t, ok[0])
		require.NoError(t, dd.Commit(ctx, tx))
		// Every connection, whatever its settings, reads what each wrote.
		for _, reader := range []*inboxsql.Driver{d, dd} {
			st, err := reader.Stats(ctx)
			require.NoError(t, err)
			for _, c := range st.Consumers {
				if c.Consumer == consumer {
					requireNear(t, c.Oldest, time.Now())
				}
			}
		}
		n, err := dd.PurgeCount(ctx, &inboxdriver.PurgeParams{OlderThan: time.Hour, Consumer: consumer})
		require.NoError(t, err)
		require.Equal(t, int64(0), n, params)
		require.NoError(t, inboxtest.AgeRows(ctx, dd, consumer, []string{id}, 2*time.Hour))
		n, err = dd.PurgeCount(ctx, &inboxdriver.PurgeParams{OlderThan: time.Hour, Consumer: consumer})
		require.NoError(t, err)
		require.Equal(t, int64(1), n, params)

		require.NoError(t, dd.DeadLetter(ctx, &inboxtype.DeadLetter{Consumer: consumer, DedupKey: "k", Reason: "r", LastSeen: when}))
		list, err := dd.DeadLetterList(ctx, &inboxtype.DeadLetterListParams{Consumer: consumer, Limit: 1})
		require.NoError(t, err)
		require.Len(t, list, 1)
		require.True(t, list[0].FirstSeen.Equal(when), "%s: first seen %v", params, list[0].FirstSeen)
	}
}
