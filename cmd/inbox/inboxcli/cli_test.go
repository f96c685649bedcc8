package inboxcli_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/cmd/inbox/inboxcli"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxmigrate"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/inboxtest"
	"github.com/txinbox/inbox/internal/require"
	"github.com/txinbox/inbox/internal/testdb"
)

// run runs the command line and returns its exit status and output.
func run(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := inboxcli.Main(context.Background(), args, &inboxcli.Env{
		Stdout: &stdout, Stderr: &stderr,
		Getenv: func(k string) string { return env[k] },
	})
	return code, stdout.String(), stderr.String()
}

func requireOneLine(t *testing.T, s string) {
	t.Helper()
	require.NotEmpty(t, s)
	require.Equal(t, 1, strings.Count(s, "\n"), "want a one-line error, got %q", s)
	require.NotContains(t, s, "goroutine", "no panic traces")
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"stats", "--bogus"},
		{"migrate", "up", "--nope"},
		{"migrate"},
		{"migrate", "sideways"},
		{"purge"},
		{"purge", "--older-than", "3x"},
		{"purge", "--older-than", "-5d"},
		{"purge", "--older-than", "30d", "--batch", "0"},
		{"forget", "--consumer", "billing"},
		{"frobnicate"},
		{"stats", "extra-arg"},
		{"stats", "--database-url", "mysql2://x"},
		{"migrate", "sql", "--dialect", "oracle"},
	} {
		code, stdout, stderr := run(t, nil, args...)
		require.Equal(t, 2, code, "%v: stderr %q", args, stderr)
		require.Empty(t, stdout, "%v", args)
		requireOneLine(t, stderr)
	}
}

func TestHelp(t *testing.T) {
	t.Parallel()
	code, stdout, _ := run(t, nil, "help")
	require.Equal(t, 0, code)
	for _, c := range []string{"migrate", "purge", "forget", "stats"} {
		require.Contains(t, stdout, c)
	}
	code, stdout, _ = run(t, nil, "purge", "-h")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "-older-than")
}

func TestUnreachableDatabase(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"stats", "--database-url", "postgres://postgres:s3cret@127.0.0.1:1/test?connect_timeout=2"},
		{"migrate", "up", "--database-url", "postgres://postgres:s3cret@127.0.0.1:1/test?connect_timeout=2"},
	} {
		code, _, stderr := run(t, nil, args...)
		require.Equal(t, 1, code)
		requireOneLine(t, stderr)
		require.Contains(t, stderr, "cannot reach the database at 127.0.0.1:1/test")
		require.NotContains(t, stderr, "s3cret")
	}
}

func TestMigratePurgeForgetStats(t *testing.T) {
	t.Parallel()
	schema := testdb.Schema(t)
	url := testdb.URL(t)
	env := map[string]string{"DATABASE_URL": url}
	db := []string{"--schema", schema}

	code, stdout, stderr := run(t, env, append([]string{"migrate", "up"}, db...)...)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "applied 001_inbox")
	code, stdout, stderr = run(t, env, append([]string{"migrate", "up"}, db...)...)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "up to date", "migrate up twice is idempotent")
	code, stdout, _ = run(t, env, append([]string{"migrate", "status"}, db...)...)
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "001_inbox")
	require.NotContains(t, stdout, "pending")

	// Fill the inbox: three rows 40 days old, one new.
	pool, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	d, err := inboxpgx.New(pool, &inboxpgx.Config{Tables: inboxdriver.Tables{Schema: schema}})
	require.NoError(t, err)
	old := time.Now().Add(-40 * 24 * time.Hour)
	oldClient, err := inbox.NewClient(d, &inbox.Config{Now: func() time.Time { return old }})
	require.NoError(t, err)
	noop := inbox.HandlerFunc[pgx.Tx](func(context.Context, pgx.Tx, inbox.Message) error { return nil })
	for range 3 {
		inboxtest.RequireApplied(t)(oldClient.Process(context.Background(), "billing", inbox.Message{ID: inboxtest.NewID()}, noop))
	}
	recent := inboxtest.NewID()
	inboxtest.RequireApplied(t)(oldClient.Process(context.Background(), "inventory", inbox.Message{ID: inboxtest.NewID()}, noop))
	newClient, err := inbox.NewClient(d, nil)
	require.NoError(t, err)
	inboxtest.RequireApplied(t)(newClient.Process(context.Background(), "billing", inbox.Message{ID: recent}, noop))

	code, stdout, stderr = run(t, env, append([]string{"stats"}, db...)...)
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, `billing\s+4\s+40d`, stdout)
	require.Regexp(t, `inventory\s+1\s+40d`, stdout)
	code, stdout, _ = run(t, env, append([]string{"stats", "--json"}, db...)...)
	require.Equal(t, 0, code)
	require.Contains(t, stdout, `"consumer":"billing","rows":4`)

	code, _, stderr = run(t, env, append([]string{"purge", "--older-than", "7d"}, db...)...)
	require.Equal(t, 1, code)
	requireOneLine(t, stderr)
	require.Contains(t, stderr, "replay horizon is 14d")

	code, stdout, _ = run(t, env, append([]string{"purge", "--older-than", "30d", "--dry-run"}, db...)...)
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "would purge 4 rows older than 30d")
	code, stdout, _ = run(t, env, append([]string{"purge", "--older-than", "30d", "--consumer", "billing", "--batch", "2"}, db...)...)
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "purged 3 rows older than 30d")
	code, stdout, _ = run(t, env, append([]string{"purge", "--older-than", "7d", "--replay-horizon", "7d"}, db...)...)
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "purged 1 rows")

	code, stdout, stderr = run(t, env, append([]string{"forget", "--consumer", "billing", "--id", strings.ToUpper(recent)}, db...)...)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "forgot billing/")
	code, _, stderr = run(t, env, append([]string{"forget", "--consumer", "billing", "--id", recent}, db...)...)
	require.Equal(t, 1, code)
	requireOneLine(t, stderr)
	require.Contains(t, stderr, "not found")
	code, _, stderr = run(t, env, append([]string{"forget", "--consumer", "billing", "--id", "nope"}, db...)...)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "not a UUID")

	code, stdout, _ = run(t, env, append([]string{"stats"}, db...)...)
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "(no rows)")

	code, stdout, _ = run(t, env, append([]string{"migrate", "down"}, db...)...)
	require.Equal(t, 0, code)
	require.Contains(t, stdout, fmt.Sprintf("reverted %03d_", inboxmigrate.Latest()), "down reverts one step")
}

func TestMigrateSQL(t *testing.T) {
	t.Parallel()
	code, stdout, _ := run(t, nil, "migrate", "sql", "--dialect", "mysql")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "CREATE TABLE IF NOT EXISTS `inbox`")
	dir := t.TempDir()
	code, stdout, _ = run(t, nil, "migrate", "sql", "--format", "golang-migrate", "--out", dir)
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "000001_inbox_inbox.up.sql")
}

// --effects-db opens and migrates the ledger's own SQLite file too.
func TestSQLiteEffectsDB(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := []string{"--database-url", "sqlite:" + dir + "/inbox.db", "--effects-db", dir + "/ledger.db"}
	code, stdout, stderr := run(t, nil, append([]string{"migrate", "up"}, db...)...)
	require.Equal(t, 0, code, stderr)
	require.Equal(t, 2*inboxmigrate.Latest(), strings.Count(stdout, "applied "), "both files migrated: %s", stdout)
	require.Contains(t, stdout, "effects ledger "+dir+"/ledger.db:")
	code, stdout, stderr = run(t, nil, append([]string{"stats"}, db...)...)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "never done: none")
	code, _, stderr = run(t, nil, "stats", "--database-url", "postgres://x", "--effects-db", dir+"/ledger.db")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "--effects-db is for SQLite only")
}
