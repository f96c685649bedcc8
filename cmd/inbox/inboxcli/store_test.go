package inboxcli_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/cmd/inbox/inboxcli"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxmigrate"
	"github.com/txinbox/inbox/inboxsql"
	"github.com/txinbox/inbox/inboxsql/inboxmysql"
	"github.com/txinbox/inbox/inboxsql/inboxpostgres"
	"github.com/txinbox/inbox/inboxsql/inboxsqlite"
	"github.com/txinbox/inbox/inboxtest"
	"github.com/txinbox/inbox/internal/testdb"
)

// database is one store the CLI opens by URL.
type database struct {
	name string
	// open returns the --database-url and extra flags of a fresh database,
	// and a client on it to seed rows.
	open func(t *testing.T) (url string, flags []string, seed *inbox.Client[*sql.Tx])
}

// seedClient returns a client over db, to seed rows; the store stamps them
// with the database's clock, so tests age them with inboxtest.AgeRows.
func seedClient(t *testing.T, db *sql.DB, engine inboxsql.Engine, tables inboxdriver.Tables) *inbox.Client[*sql.Tx] {
	t.Helper()
	d, err := inboxsql.New(db, engine, &inboxsql.Config{Tables: tables})
	require.NoError(t, err)
	c, err := inbox.NewClient(d, &inbox.Config{ReplayHorizon: time.Hour})
	require.NoError(t, err)
	return c
}

var databases = []database{
	{"sqlite", func(t *testing.T) (string, []string, *inbox.Client[*sql.Tx]) {
		path := filepath.Join(t.TempDir(), "inbox.db")
		return "sqlite:" + path, nil, sqliteSeed(t, path)
	}},
	{"file", func(t *testing.T) (string, []string, *inbox.Client[*sql.Tx]) {
		path := filepath.Join(t.TempDir(), "inbox.db")
		return "file:" + path, nil, sqliteSeed(t, path)
	}},
	{"mysql", func(t *testing.T) (string, []string, *inbox.Client[*sql.Tx]) {
		url, name := testdb.MySQLDatabase(t)
		db, err := sql.Open("mysql", testdb.MySQLDSN(t, name))
		require.NoError(t, err)
		t.Cleanup(func() { db.Close() })
		return url, nil, seedClient(t, db, inboxmysql.MariaDB, inboxdriver.Tables{})
	}},
	{"postgres", func(t *testing.T) (string, []string, *inbox.Client[*sql.Tx]) {
		url := testdb.URL(t)
		schema := testdb.Schema(t)
		db := stdlib.OpenDBFromPool(inboxcli.SharedPool(t))
		t.Cleanup(func() { db.Close() })
		return url, []string{"--schema", schema}, seedClient(t, db, inboxpostgres.Engine, inboxdriver.Tables{Schema: schema})
	}},
}

func sqliteSeed(t *testing.T, path string) *inbox.Client[*sql.Tx] {
	t.Helper()
	db, err := inboxsqlite.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return seedClient(t, db, inboxsqlite.Engine, inboxdriver.Tables{})
}

var noop = inbox.HandlerFunc[*sql.Tx](func(context.Context, *sql.Tx, inbox.Message) error { return nil })

// Every command works on every scheme of --database-url.
func TestCommandsOnEachDatabase(t *testing.T) {
	for _, db := range databases {
		t.Run(db.name, func(t *testing.T) {
			t.Parallel()
			url, flags, seed := db.open(t)
			with := func(args ...string) []string {
				return append(append(args, "--database-url", url), flags...)
			}
			code, out, errOut := run(t, nil, with("migrate", "up")...)
			require.Equal(t, 0, code, errOut)
			require.Equal(t, inboxmigrate.Latest(), strings.Count(out, "applied "), out)
			require.True(t, strings.HasPrefix(out, "applied 001_inbox\n"), out)
			code, out, errOut = run(t, nil, with("migrate", "up")...)
			require.Equal(t, 0, code, errOut)
			require.Equal(t, fmt.Sprintf("up to date at version %03d\n", inboxmigrate.Latest()), out)
			code, out, errOut = run(t, nil, with("migrate", "status")...)
			require.Equal(t, 0, code, errOut)
			require.Equal(t, inboxmigrate.Latest(), strings.Count(out, " applied\n"), out)
			require.NotContains(t, out, "pending")

			code, out, errOut = run(t, nil, with("stats", "--json")...)
			require.Equal(t, 0, code, errOut)
			var st struct {
				Consumers []struct {
					Consumer string `json:"consumer"`
					Rows     int64  `json:"rows"`
				} `json:"consumers"`
				TableBytes int64 `json:"table_bytes"`
			}
			require.NoError(t, json.Unmarshal([]byte(out), &st))
			require.Empty(t, st.Consumers)

			// Two messages applied 40 days ago.
			kept, purged := inboxtest.NewID(), inboxtest.NewID()
			ctx := context.Background()
			for _, id := range []string{kept, purged} {
				inboxtest.RequireApplied(t)(seed.Process(ctx, "billing", inbox.Message{ID: id}, noop))
			}
			require.NoError(t, inboxtest.AgeRows(ctx, seed.Driver(), "billing", nil, 40*24*time.Hour))
			code, out, errOut = run(t, nil, with("stats", "--json")...)
			require.Equal(t, 0, code, errOut)
			require.NoError(t, json.Unmarshal([]byte(out), &st))
			require.Len(t, st.Consumers, 1)
			require.Equal(t, "billing", st.Consumers[0].Consumer)
			require.Equal(t, int64(2), st.Consumers[0].Rows)
			require.NotZero(t, st.TableBytes)
			code, out, errOut = run(t, nil, with("stats")...)
			require.Equal(t, 0, code, errOut)
			require.Regexp(t, `(?m)^billing +2 +40d ago +40d ago$`, out)
			require.Contains(t, out, "table size: ")

			// forget says what it deletes; with --dry-run it deletes
			// nothing.
			for range 2 {
				code, out, errOut = run(t, nil, with("forget", "--consumer", "billing", "--id", kept, "--dry-run")...)
				require.Equal(t, 0, code, errOut)
				require.Equal(t, "would delete 1 inbox row of billing/"+kept+": its next delivery would apply again\n", out)
			}
			code, out, errOut = run(t, nil, with("forget", "--consumer", "billing", "--id", kept)...)
			require.Equal(t, 0, code, errOut)
			require.Equal(t, "deleted 1 inbox row of billing/"+kept+": its next delivery applies again\n", out)
			code, _, errOut = run(t, nil, with("forget", "--consumer", "billing", "--id", kept, "--dry-run")...)
			require.Equal(t, 1, code)
			require.Contains(t, errOut, "not found")
			code, _, errOut = run(t, nil, with("forget", "--consumer", "billing", "--id", kept)...)
			require.Equal(t, 1, code)
			require.Contains(t, errOut, "not found")

			code, out, errOut = run(t, nil, with("purge", "--older-than", "30d", "--dry-run")...)
			require.Equal(t, 0, code, errOut)
			require.Equal(t, "would purge 1 row older than 30d\n", out)
			code, out, errOut = run(t, nil, with("purge", "--older-than", "30d")...)
			require.Equal(t, 0, code, errOut)
			require.Equal(t, "purged 1 row older than 30d\n", out)
			inboxtest.RequireApplied(t)(seed.Process(ctx, "billing", inbox.Message{ID: purged}, noop))

			code, out, errOut = run(t, nil, with("migrate", "down", "--to", "0")...)
			require.Equal(t, 1, code, "the inbox holds a row: %s", errOut)
			require.Contains(t, out, "reverting 001_inbox: drops inbox (1 row)")
			require.Contains(t, errOut, "refusing to drop inbox that holds 1 row")
			code, out, errOut = run(t, nil, with("migrate", "status")...)
			require.Equal(t, 0, code, errOut)
			require.NotContains(t, out, " pending\n", "nothing was reverted")
			code, out, errOut = run(t, nil, with("migrate", "down", "--to", "0", "--force")...)
			require.Equal(t, 0, code, errOut)
			require.Equal(t, inboxmigrate.Latest(), strings.Count(out, "reverted "), out)
			require.True(t, strings.HasSuffix(out, "reverted 001_inbox\n"), out)
			code, out, errOut = run(t, nil, with("migrate", "status")...)
			require.Equal(t, 0, code, errOut)
			require.Equal(t, inboxmigrate.Latest(), strings.Count(out, " pending\n"), out)
		})
	}
}

func TestDatabaseURLMistakes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ url, want string }{
		{"oracle://db", `unsupported scheme "oracle"`},
		{"sqlite:", "want sqlite:PATH"},
		{"mysql://root:secret@127.0.0.1:3306", "want mysql://user:password@host:port/database"},
		{"mysql://root:secret@127.0.0.1:3306/db?parseTime=maybe", "invalid bool value"},
		// A URL that does not parse: url.Error quotes it whole, password
		// and all.
		{"mysql://root:secret@127.0.0.1:bad/db", `--database-url: invalid port ":bad" after host`},
		{"mysql://root:secret%zz@127.0.0.1:3306/db", `--database-url: invalid URL escape "%zz"`},
		{"postgres://postgres:secret@127.0.0.1:bad/test", `--database-url: invalid port ":bad" after host`},
		{"postgres://postgres:secret%zz@127.0.0.1/test", `--database-url: invalid URL escape "%zz"`},
		{"postgres://postgres:secret@127.0.0.1/test?connect_timeout=x", "invalid connect_timeout"},
	} {
		code, _, errOut := run(t, nil, "stats", "--database-url", c.url)
		require.Equal(t, 2, code, c.url)
		require.Contains(t, errOut, c.want, c.url)
		require.NotContains(t, errOut, "secret", "the password leaked")
	}
	code, _, errOut := run(t, nil, "stats", "--database-url", "sqlite:"+filepath.Join(t.TempDir(), "x.db"), "--schema", "s")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "SQLite has no schemas")
	// A host that does not answer.
	for url, where := range map[string]string{
		"mysql://root:secret@127.0.0.1:1/db":                            "127.0.0.1:1/db",
		"postgres://postgres:secret@127.0.0.1:1/test?connect_timeout=2": "127.0.0.1:1/test",
	} {
		code, _, errOut = run(t, nil, "stats", "--database-url", url)
		require.Equal(t, 1, code, url)
		require.Contains(t, errOut, "cannot reach the database at "+where, url)
		require.False(t, strings.Contains(errOut, "secret"), "the password leaked: %s", errOut)
	}
}

// The SQL that 'migrate sql' prints, applied by another tool, makes a
// schema the store works on, for each dialect.
func TestMigrateSQLMakesAWorkingSchema(t *testing.T) {
	for _, c := range []struct {
		dialect string
		open    func(t *testing.T) (*sql.DB, inboxsql.Engine, inboxdriver.Tables)
	}{
		{"sqlite", func(t *testing.T) (*sql.DB, inboxsql.Engine, inboxdriver.Tables) {
			db, err := inboxsqlite.Open(filepath.Join(t.TempDir(), "inbox.db"))
			require.NoError(t, err)
			t.Cleanup(func() { db.Close() })
			return db, inboxsqlite.Engine, inboxdriver.Tables{}
		}},
		{"mysql", func(t *testing.T) (*sql.DB, inboxsql.Engine, inboxdriver.Tables) {
			db, _ := testdb.MySQL(t)
			return db, inboxmysql.MariaDB, inboxdriver.Tables{}
		}},
		{"postgres", func(t *testing.T) (*sql.DB, inboxsql.Engine, inboxdriver.Tables) {
			db := stdlib.OpenDBFromPool(inboxcli.SharedPool(t))
			t.Cleanup(func() { db.Close() })
			return db, inboxpostgres.Engine, inboxdriver.Tables{Schema: testdb.Schema(t)}
		}},
	} {
		t.Run(c.dialect, func(t *testing.T) {
			t.Parallel()
			db, engine, tables := c.open(t)
			args := []string{"migrate", "sql", "--dialect", c.dialect}
			if tables.Schema != "" {
				args = append(args, "--schema", tables.Schema)
			}
			code, out, errOut := run(t, nil, args...)
			require.Equal(t, 0, code, errOut)
			ctx := context.Background()
			for _, stmt := range strings.Split(out, ";\n") {
				if strings.TrimSpace(stmt) == "" {
					continue
				}
				_, err := db.ExecContext(ctx, stmt)
				require.NoError(t, err, stmt)
			}
			c := seedClient(t, db, engine, tables)
			id := inboxtest.NewID()
			inboxtest.RequireApplied(t)(c.Process(ctx, "billing", inbox.Message{ID: id}, noop))
			inboxtest.RequireDuplicate(t)(c.Process(ctx, "billing", inbox.Message{ID: id}, noop))
			require.NoError(t, c.DeadLetter(ctx, inbox.DeadLetterParams{Consumer: "billing", Message: inbox.Message{ID: id}, Err: inbox.ErrMalformedID}))
		})
	}
}
