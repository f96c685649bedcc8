package inboxcli_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/cmd/inbox/inboxcli"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxmigrate"
	"github.com/txinbox/inbox/inboxsql/inboxsqlite"
	"github.com/txinbox/inbox/internal/testdb"
	"github.com/txinbox/inbox/outbox"
)

// 'migrate down' refuses a version outside 0..latest before it touches
// the database, says what it drops and how many rows each table holds,
// and drops rows only with --force.
func TestMigrateDownRefusesASlip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, schema := migratedPgx(t)
	o, err := outbox.New(d, nil)
	require.NoError(t, err)
	admin, err := inbox.NewAdmin(d, nil)
	require.NoError(t, err)
	_, err = o.Enqueue(ctx, outbox.Message{Topic: "orders", Payload: []byte(`{"n":1}`)}, outbox.Message{Topic: "orders", Payload: []byte(`{"n":2}`)})
	require.NoError(t, err)
	env := map[string]string{"DATABASE_URL": testdb.URL(t)}
	with := func(args ...string) []string { return append(args, "--schema", schema) }
	pending := func() int64 {
		t.Helper()
		st, err := admin.OutboxStats(ctx)
		require.NoError(t, err)
		return st.Pending
	}

	for _, to := range []string{"-1", fmt.Sprint(inboxmigrate.Latest() + 1), "x"} {
		code, stdout, stderr := run(t, env, with("migrate", "down", "--to", to)...)
		require.Equal(t, 2, code, "--to %s: %s", to, stderr)
		require.Empty(t, stdout, "--to %s", to)
		requireOneLine(t, stderr)
		require.Equal(t, int64(2), pending(), "--to %s dropped nothing", to)
	}

	// The outbox's migration is 006: reverting to 005 drops its table.
	code, stdout, stderr := run(t, env, with("migrate", "down", "--to", "5", "--dry-run")...)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "would revert 006_outbox: drops outbox (2 rows), outbox_keys (0 rows)")
	require.Equal(t, int64(2), pending())

	code, stdout, stderr = run(t, env, with("migrate", "down", "--to", "5")...)
	require.Equal(t, 1, code, stderr)
	requireOneLine(t, stderr)
	require.Contains(t, stdout, "reverting 006_outbox: drops outbox (2 rows)", "it says what it would drop")
	require.Contains(t, stderr, "refusing to drop outbox that holds 2 rows: add --force")
	require.Equal(t, int64(2), pending(), "nothing was dropped")

	code, stdout, stderr = run(t, env, with("migrate", "down", "--to", "5", "--force")...)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "reverted 006_outbox")
	exists, err := d.TableExists(ctx, "outbox")
	require.NoError(t, err)
	require.False(t, exists)

	// Empty tables go without --force.
	code, stdout, stderr = run(t, env, with("migrate", "down", "--to", "3")...)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "reverted 005_dead_letter_replay")
	require.Contains(t, stdout, "reverted 004_takeovers")
}

// 'migrate up --table X' on a schema whose version table records the
// migrations under the default names refuses, names the missing table, and
// creates nothing; stats and doctor say the same. In a schema of its own,
// the same command creates X.
func TestMigrateUpOtherTableNames(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, schema := migratedPgx(t)
	env := map[string]string{"DATABASE_URL": testdb.URL(t)}
	custom := []string{"--schema", schema, "--table", "custom_inbox"}

	code, stdout, stderr := run(t, env, append([]string{"migrate", "up"}, custom...)...)
	require.Equal(t, 1, code, stderr)
	require.Empty(t, stdout)
	requireOneLine(t, stderr)
	require.Contains(t, stderr, "table custom_inbox does not exist")
	require.Contains(t, stderr, "schema of their own")
	d := pgxDriver(t, inboxdriver.Tables{Schema: schema, Inbox: "custom_inbox"})
	exists, err := d.TableExists(ctx, "custom_inbox")
	require.NoError(t, err)
	require.False(t, exists, "the refused migration created nothing")

	// Nor does down revert the migrations the version table records for
	// the default names: one step would drop the outbox's index, and --to
	// 0 the default outbox with its events.
	for _, args := range [][]string{{"migrate", "down"}, {"migrate", "down", "--dry-run"}, {"migrate", "down", "--to", "0", "--force"}} {
		code, stdout, stderr = run(t, env, append(args, custom...)...)
		require.Equal(t, 1, code, "%q: %s", args, stderr)
		require.Empty(t, stdout, "%q", args)
		requireOneLine(t, stderr)
		require.Contains(t, stderr, "table custom_inbox does not exist", "%q", args)
	}
	m, err := inboxmigrate.New(d)
	require.NoError(t, err)
	applied, err := m.Applied(ctx)
	require.NoError(t, err)
	require.Equal(t, inboxmigrate.Latest(), applied[len(applied)-1], "the refused reverts changed nothing")
	exists, err = d.TableExists(ctx, "outbox")
	require.NoError(t, err)
	require.True(t, exists)

	// stats and doctor say what migrate says, in the same words.
	said := fmt.Sprintf("inbox_migrations records migrations up to %03d, but table custom_inbox does not exist: one version table serves one set of table names, so migrate other names in a schema of their own", inboxmigrate.Latest())
	code, _, stderr = run(t, env, append([]string{"migrate", "up"}, custom...)...)
	require.Equal(t, 1, code, stderr)
	require.Contains(t, stderr, said)
	code, _, stderr = run(t, env, append([]string{"stats"}, custom...)...)
	require.Equal(t, 1, code, stderr)
	requireOneLine(t, stderr)
	require.Contains(t, stderr, said)
	code, stdout, _ = run(t, env, append([]string{"doctor"}, custom...)...)
	require.Equal(t, 1, code)
	require.Regexp(t, `fail\s+schema\s+.*custom_inbox does not exist`, stdout)
	require.Contains(t, stdout, said)
	// No check tells the user to run the 'migrate up' that refuses.
	require.NotContains(t, stdout, "inbox migrate up")
	require.Regexp(t, `skip\s+purge_index\s+the store is not migrated`, stdout)

	own := testdb.Schema(t)
	code, stdout, stderr = run(t, env, "migrate", "up", "--schema", own, "--table", "custom_inbox")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "applied 001_inbox")
	d = pgxDriver(t, inboxdriver.Tables{Schema: own, Inbox: "custom_inbox"})
	exists, err = d.TableExists(ctx, "custom_inbox")
	require.NoError(t, err)
	require.True(t, exists)
}

// The id column's type is read from the database: --id-type need not be
// given, and one that contradicts the column is a usage mistake that says
// so, not the server's "invalid input syntax for type uuid". A table name
// with a NUL byte is refused before any database is reached.
func TestIDTypeAndTableNameMistakes(t *testing.T) {
	t.Parallel()
	_, schema := migratedPgx(t)
	env := map[string]string{"DATABASE_URL": testdb.URL(t)}
	db := []string{"--schema", schema}

	code, _, stderr := run(t, env, append([]string{"forget", "--consumer", "billing", "--id-type", "text", "--id", "hello"}, db...)...)
	require.Equal(t, 2, code, stderr)
	requireOneLine(t, stderr)
	require.Contains(t, stderr, "--id-type text: the message_id column of table inbox is uuid")
	require.NotContains(t, stderr, "SQLSTATE")

	code, _, stderr = run(t, env, append([]string{"forget", "--consumer", "billing", "--id", "hello"}, db...)...)
	require.Equal(t, 2, code, stderr)
	require.Contains(t, stderr, "not a UUID")

	// A text column is read as such: no flag, and "hello" is a valid id.
	text := testdb.Schema(t)
	code, _, stderr = run(t, env, "migrate", "up", "--schema", text, "--id-type", "text")
	require.Equal(t, 0, code, stderr)
	code, _, stderr = run(t, env, "forget", "--consumer", "billing", "--id", "hello", "--schema", text)
	require.Equal(t, 1, code, stderr)
	require.Contains(t, stderr, "not found")

	for _, args := range [][]string{
		{"stats", "--table", "in\x00box"},
		{"stats", "--table", "in\xffbox"},
		{"migrate", "up", "--schema", "s\x00"},
		{"deadletters", "list", "--table", "x\x00", "--database-url", "postgres://nobody@127.0.0.1:1/none"},
	} {
		code, stdout, stderr := run(t, env, args...)
		require.Equal(t, 2, code, "%q: %s", args, stderr)
		require.Empty(t, stdout)
		requireOneLine(t, stderr)
		require.NotContains(t, stderr, "SQLSTATE", "%q", args)
	}
}

// 'migrate status' and 'migrate down' only read: on a fresh database they
// say that nothing is applied and nothing is to revert, and make nothing,
// not the version table, nor, on Postgres, the schema --schema names.
func TestMigrateStatusAndDownMakeNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		// open returns a fresh database's flags, and what counts the
		// tables (and schemas) in it.
		open func(t *testing.T) ([]string, func() int)
	}{
		{"postgres", func(t *testing.T) ([]string, func() int) {
			schema := "inbox_test_" + testdb.RandomSuffix() // never made
			t.Cleanup(func() { testdb.Exec(t, `DROP SCHEMA IF EXISTS `+testdb.QuoteIdent(schema)+` CASCADE`) })
			return []string{"--database-url", testdb.URL(t), "--schema", schema}, func() int {
				var n int
				require.NoError(t, inboxcli.SharedPool(t).QueryRow(ctx,
					`SELECT count(*) FROM pg_namespace WHERE nspname = $1`, schema).Scan(&n))
				return n
			}
		}},
		{"mysql", func(t *testing.T) ([]string, func() int) {
			url, name := testdb.MySQLDatabase(t)
			db, err := sql.Open("mysql", testdb.MySQLDSN(t, name))
			require.NoError(t, err)
			t.Cleanup(func() { db.Close() })
			return []string{"--database-url", url}, func() int {
				var n int
				require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM information_schema.tables WHERE table_schema = ?`, name).Scan(&n))
				return n
			}
		}},
		{"sqlite", func(t *testing.T) ([]string, func() int) {
			path := filepath.Join(t.TempDir(), "inbox.db")
			db, err := inboxsqlite.Open(path)
			require.NoError(t, err)
			t.Cleanup(func() { db.Close() })
			return []string{"--database-url", "sqlite:" + path}, func() int {
				var n int
				require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master`).Scan(&n))
				return n
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			flags, count := tc.open(t)
			require.Equal(t, 0, count(), "a fresh database")

			code, stdout, stderr := run(t, nil, append([]string{"migrate", "status"}, flags...)...)
			require.Equal(t, 0, code, stderr)
			require.Equal(t, inboxmigrate.Latest(), strings.Count(stdout, " pending\n"), stdout)
			require.Equal(t, 0, count(), "status made something")

			for _, args := range [][]string{{"migrate", "down"}, {"migrate", "down", "--to", "0"}, {"migrate", "down", "--dry-run"}} {
				code, stdout, stderr = run(t, nil, append(args, flags...)...)
				require.Equal(t, 0, code, "%q: %s", args, stderr)
				require.Equal(t, "nothing to revert\n", stdout, "%q", args)
				require.Equal(t, 0, count(), "%q made something", args)
			}
		})
	}
}
