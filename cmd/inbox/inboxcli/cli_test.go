package inboxcli_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/cmd/inbox/inboxcli"
	"github.com/txinbox/inbox/cmd/inbox/internal/chaos"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxmigrate"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/inboxtest"
	"github.com/txinbox/inbox/internal/dbfault"
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
		// A duration past 100 years, whose parts would overflow their sum.
		{"purge", "--older-than", "36500d2000000h"},
		{"purge", "--older-than", "100000000h"},
		// Consumer names and ids a database would refuse with an SQL error.
		{"purge", "--older-than", "30d", "--consumer", "\xff"},
		{"forget", "--consumer", "bill\x00ing", "--id", "0190c8e4-7b3a-7cc1-9f00-2b7c4e1d9a55"},
		{"forget", "--consumer", "billing", "--id", "nope"},
		{"forget", "--consumer", "billing", "--id", "0190c8e4-7b3a-7cc1-9f00-2b7c4e1d9a55", "--id-type", "int"},
		{"deadletters", "list", "--consumer", "bill\x00ing"},
		// chaos and demo check their flags before they start anything.
		{"chaos", "--transport", "rabbit"},
		{"chaos", "--events", "-5"},
		{"chaos", "--duplicates", "NaN"},
		{"chaos", "--duplicates", "1.5"},
		{"chaos", "--consumers", "0"},
		{"chaos", "--duration", "1s"},
		{"chaos", "--transport", "sqs", "--crash-poison", "2"},
		{"chaos", "--events", "10", "--crash-poison", "2"},
		{"chaos", "--db-faults", "drop-table"},
		{"chaos", "--db-faults", ""},
		{"chaos", "--db-faults", "read-only,"},
		{"demo", "--database-url", "sqlite:/tmp/demo.db"},
	} {
		code, stdout, stderr := run(t, nil, args...)
		require.Equal(t, 2, code, "%v: stderr %q", args, stderr)
		require.Empty(t, stdout, "%v", args)
		requireOneLine(t, stderr)
	}
}

// --db-faults: a comma list of kinds, all for the run's default faults
// (not every kind: the revoke-connect kinds need a database whose CONNECT
// PUBLIC does not hold), none for none.
func TestParseDBFaults(t *testing.T) {
	t.Parallel()
	got, err := inboxcli.ParseDBFaults("all")
	require.NoError(t, err)
	require.Equal(t, chaos.DefaultDBFaults, got)
	got[0] = "changed"
	require.NotEqual(t, dbfault.Kind("changed"), chaos.DefaultDBFaults[0], "all is a copy")
	got, err = inboxcli.ParseDBFaults("none")
	require.NoError(t, err)
	require.NotNil(t, got, "none is an empty list, not the default")
	require.Empty(t, got)
	got, err = inboxcli.ParseDBFaults(" read-only , table-lock")
	require.NoError(t, err)
	require.Equal(t, []dbfault.Kind{dbfault.ReadOnly, dbfault.TableLock}, got)
	for _, bad := range []string{"", "drop-table", "read-only,,table-lock", "all,read-only"} {
		_, err := inboxcli.ParseDBFaults(bad)
		require.Error(t, err, bad)
		require.Contains(t, err.Error(), "--db-faults", bad)
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
	client, err := inbox.NewClient(d, nil)
	require.NoError(t, err)
	noop := inbox.HandlerFunc[pgx.Tx](func(context.Context, pgx.Tx, inbox.Message) error { return nil })
	for range 3 {
		inboxtest.RequireApplied(t)(client.Process(context.Background(), "billing", inbox.Message{ID: inboxtest.NewID()}, noop))
	}
	inboxtest.RequireApplied(t)(client.Process(context.Background(), "inventory", inbox.Message{ID: inboxtest.NewID()}, noop))
	// processed_at is the database's clock: age the rows to 40 days.
	for _, consumer := range []string{"billing", "inventory"} {
		require.NoError(t, inboxtest.AgeRows(context.Background(), d, consumer, nil, 40*24*time.Hour))
	}
	recent := inboxtest.NewID()
	inboxtest.RequireApplied(t)(client.Process(context.Background(), "billing", inbox.Message{ID: recent}, noop))

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
	require.Equal(t, 2, code, "a malformed id is a usage mistake")
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

// Each error says once what failed: no "chaos: chaos:", and the prefix of
// the package under the command is not repeated.
func TestErrorsSayItOnce(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"chaos", "--transport", "rabbit"},
		{"demo", "--database-url", "sqlite:x.db"},
		{"forget", "--consumer", "billing", "--id", "nope"},
	} {
		code, _, stderr := run(t, nil, args...)
		require.Equal(t, 2, code, "%v", args)
		requireOneLine(t, stderr)
		require.False(t, strings.HasPrefix(stderr, "inbox "+args[0]+": "+args[0]+":"), "%v: %s", args, stderr)
		require.NotContains(t, stderr, "inbox: ", "%v", args)
	}
}

// A command that needs the inbox tables, run where they are missing, names
// the database and the schema and says to run 'inbox migrate up'.
func TestMissingTables(t *testing.T) {
	t.Parallel()
	schema := testdb.Schema(t)
	env := map[string]string{"DATABASE_URL": testdb.URL(t)}
	sqlite := "sqlite:" + t.TempDir() + "/empty.db"
	id := "0190c8e4-7b3a-7cc1-9f00-2b7c4e1d9a55"
	for _, args := range [][]string{
		{"stats", "--schema", schema},
		{"purge", "--older-than", "30d", "--schema", schema},
		{"forget", "--consumer", "billing", "--id", id, "--schema", schema},
		{"deadletters", "list", "--schema", schema},
		{"deadletters", "show", "1", "--schema", schema},
		{"deadletters", "delete", "1", "--schema", schema},
		{"stats", "--database-url", sqlite},
		{"deadletters", "list", "--database-url", sqlite},
	} {
		code, stdout, stderr := run(t, env, args...)
		require.Equal(t, 1, code, "%v: %s", args, stderr)
		require.Empty(t, stdout, "%v", args)
		requireOneLine(t, stderr)
		require.Contains(t, stderr, "run 'inbox migrate up'", "%v", args)
		if strings.HasPrefix(args[len(args)-1], "sqlite:") {
			require.Contains(t, stderr, "the database at "+strings.TrimPrefix(sqlite, "sqlite:"), "%v", args)
		} else {
			require.Contains(t, stderr, fmt.Sprintf("schema %q of the database at 127.0.0.1:5432/test", schema), "%v", args)
		}
	}
}

// Without --database-url or DATABASE_URL, the database is the one libpq's
// defaults and the PG* variables choose: the error names it and says so.
func TestStatsWithoutURL(t *testing.T) {
	schema := testdb.Schema(t)
	cfg, err := pgx.ParseConfig(testdb.URL(t))
	require.NoError(t, err)
	t.Setenv("PGHOST", cfg.Host)
	t.Setenv("PGPORT", fmt.Sprint(cfg.Port))
	t.Setenv("PGUSER", cfg.User)
	t.Setenv("PGPASSWORD", cfg.Password)
	t.Setenv("PGDATABASE", cfg.Database)
	t.Setenv("PGSSLMODE", "disable")
	t.Setenv("PGOPTIONS", "-c search_path="+schema)
	code, stdout, stderr := run(t, nil, "stats")
	require.Equal(t, 1, code, stderr)
	require.Empty(t, stdout)
	requireOneLine(t, stderr)
	require.Contains(t, stderr, fmt.Sprintf("the database at %s:%d/%s (no --database-url or DATABASE_URL", cfg.Host, cfg.Port, cfg.Database))
	require.Contains(t, stderr, "run 'inbox migrate up'")
}

// docs/CLI.md has a section for every command that 'inbox help' lists,
// with its exit status and every subcommand the help names, and no section
// for a command that does not exist.
func TestCLIDocsCoverEveryCommand(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "CLI.md"))
	require.NoError(t, err)
	sections := map[string]string{}
	heading := regexp.MustCompile("(?m)^## `inbox ([a-z-]+)`\n")
	locs := heading.FindAllStringSubmatchIndex(string(doc), -1)
	for i, loc := range locs {
		end := len(doc)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		sections[string(doc[loc[2]:loc[3]])] = string(doc[loc[1]:end])
	}

	code, stdout, _ := run(t, nil, "help")
	require.Equal(t, 0, code)
	listed := map[string]bool{}
	line := regexp.MustCompile(`(?m)^  ([a-z-]+) +(.*)$`)
	subcommands := regexp.MustCompile(`: ([a-z]+(?:, [a-z]+)+)$`)
	for _, m := range line.FindAllStringSubmatch(stdout, -1) {
		name, summary := m[1], m[2]
		listed[name] = true
		section, ok := sections[name]
		if !ok {
			t.Errorf("docs/CLI.md has no section \"## `inbox %s`\"", name)
			continue
		}
		require.Contains(t, section, "Exit status", "the section of %s", name)
		// A summary that ends in ": up, down, status, sql" names the
		// subcommands.
		if m := subcommands.FindStringSubmatch(summary); m != nil {
			for _, sub := range strings.Split(m[1], ", ") {
				require.Contains(t, section, "inbox "+name+" "+sub, "the section of %s names its subcommand %s", name, sub)
			}
		}
	}
	require.True(t, listed["bench"] && listed["deadletters"], "the help lists the commands: %s", stdout)
	for name := range sections {
		require.True(t, listed[name], "docs/CLI.md has a section for %q, which 'inbox help' does not list", name)
	}
}

func TestParseDuration(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want time.Duration
		err  string
	}{
		{in: "30d", want: 30 * 24 * time.Hour},
		{in: "1d12h", want: 36 * time.Hour},
		{in: "90m", want: 90 * time.Minute},
		{in: "36500d", want: 36500 * 24 * time.Hour},
		{in: "36500d1h", err: "under 100 years"},
		{in: "36500d2000000h", err: "under 100 years"}, // the sum would overflow
		{in: "100000000h", err: "under 100 years"},     // time.ParseDuration overflows
		{in: "-5d", err: "must be positive"},
		{in: "-5h", err: "must be positive"},
		{in: "3x", err: "want a form like"},
		{in: "d", err: "want a form like"},
	} {
		got, err := inboxcli.ParseDuration(c.in)
		if c.err != "" {
			require.ErrorContains(t, err, c.err, c.in)
			continue
		}
		require.NoError(t, err, c.in)
		require.Equal(t, c.want, got, c.in)
	}
}
