package inboxcli_test

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/cmd/inbox/inboxcli"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxmigrate"
	"github.com/txinbox/inbox/inboxtest"
	"github.com/txinbox/inbox/inboxtype"
	"github.com/txinbox/inbox/internal/command/commandtest"
	"github.com/txinbox/inbox/internal/testdb"
)

// run runs the command line and returns its exit status and output.
func run(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	return commandtest.Run(t, inboxcli.Main, env, args...)
}

var requireOneLine = commandtest.RequireOneLine

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
		// Windows inside the replay horizon, refused before any database
		// is reached (there is none here).
		{"purge", "--older-than", "0s"},
		{"purge", "--older-than", "13d"},
		{"partitions", "drop", "--retention", "14d"},
		{"partitions", "drop", "--retention", "20d", "--replay-horizon", "20d"},
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

// A zero window, horizon, retention or skew, which would let a purge or a
// drop reach every row or be read as the library's default, and a skew
// the other durations do not cover, are usage mistakes that name the flag,
// refused before the database (one that does not answer here) is reached.
func TestZeroOrInconsistentWindowsNameTheFlag(t *testing.T) {
	t.Parallel()
	nowhere := []string{"--database-url", "postgres://nobody@127.0.0.1:1/none?connect_timeout=2"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"purge", "--older-than", "0s", "--replay-horizon", "0s"}, "--older-than 0s: must be positive"},
		{[]string{"purge", "--older-than", "30d", "--replay-horizon", "0d"}, "--replay-horizon 0s: must be positive"},
		{[]string{"purge", "--older-than", "13d"}, "--older-than 13d: refused: the replay horizon is 14d"},
		{[]string{"partitions", "drop", "--retention", "0s", "--replay-horizon", "0s", "--max-skew", "0s"}, "--max-skew 0s: must be positive"},
		{[]string{"partitions", "drop", "--retention", "0s"}, "--retention 0s: must be positive"},
		{[]string{"partitions", "drop", "--retention", "30d", "--replay-horizon", "0s"}, "--replay-horizon 0s: must be positive"},
		{[]string{"partitions", "drop", "--retention", "20d", "--max-skew", "8d"}, "--retention 20d: shorter than the replay horizon 14d plus the producers' clock skew 8d (--max-skew)"},
		{[]string{"partitions", "premake", "--ahead", "0s"}, "--ahead 0s: must be positive"},
		{[]string{"partitions", "premake", "--ahead", "2d", "--max-skew", "3d"}, "--ahead 2d is shorter than --max-skew 3d"},
		{[]string{"partitions", "adopt", "--max-skew", "0s"}, "--max-skew 0s: must be positive"},
	} {
		code, stdout, stderr := run(t, nil, append(tc.args, nowhere...)...)
		require.Equal(t, 2, code, "%q: %s", tc.args, stderr)
		require.Empty(t, stdout, "%q", tc.args)
		requireOneLine(t, stderr)
		require.Contains(t, stderr, tc.want, "%q", tc.args)
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
	d := pgxDriver(t, inboxdriver.Tables{Schema: schema})
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
	require.Equal(t, 2, code, "a window inside the replay horizon is a usage mistake")
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
	require.Contains(t, stdout, "purged 1 row older")

	code, stdout, stderr = run(t, env, append([]string{"forget", "--consumer", "billing", "--id", strings.ToUpper(recent)}, db...)...)
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "deleted 1 inbox row of billing/"+strings.ToUpper(recent)+": its next delivery applies again\n", stdout)
	code, _, stderr = run(t, env, append([]string{"forget", "--consumer", "billing", "--id", recent}, db...)...)
	require.Equal(t, 1, code)
	requireOneLine(t, stderr)
	require.Equal(t, "inbox forget: billing/"+recent+": not found: no inbox row and no effect-ledger entry\n", stderr)
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

// 'inbox forget' says what it deletes, the inbox row and the message's
// effect-ledger entries, and with --dry-run deletes nothing.
func TestForgetSaysWhatItDeletes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, schema := migratedPgx(t)
	c, err := inbox.NewClient(d, nil)
	require.NoError(t, err)
	id := inboxtest.NewID()
	noop := inbox.HandlerFunc[pgx.Tx](func(context.Context, pgx.Tx, inbox.Message) error { return nil })
	inboxtest.RequireApplied(t)(c.Process(ctx, "billing", inbox.Message{ID: id}, noop))
	for _, step := range []string{"capture", "email"} {
		_, started, err := d.EffectBegin(ctx, &inboxdriver.EffectBeginParams{
			EffectKeyParams: inboxdriver.EffectKeyParams{Consumer: "billing", ID: id, Step: step}, Now: time.Now()})
		require.NoError(t, err)
		require.True(t, started)
	}
	env := map[string]string{"DATABASE_URL": testdb.URL(t)}
	args := []string{"forget", "--consumer", "billing", "--id", id, "--schema", schema}

	code, stdout, stderr := run(t, env, append(args, "--dry-run")...)
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "would delete 1 inbox row of billing/"+id+" and 2 effect-ledger entries: its next delivery would apply again\n", stdout)
	inboxtest.RequireDuplicate(t)(c.Process(ctx, "billing", inbox.Message{ID: id}, noop))

	code, stdout, stderr = run(t, env, args...)
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "deleted 1 inbox row of billing/"+id+" and 2 effect-ledger entries: its next delivery applies again\n", stdout)
	effects, err := c.Admin().EffectList(ctx, inboxtype.EffectListParams{Consumer: "billing", MessageID: id, Limit: 10})
	require.NoError(t, err)
	require.Empty(t, effects)
	inboxtest.RequireApplied(t)(c.Process(ctx, "billing", inbox.Message{ID: id}, noop))
}

// Each error says once what failed: no "chaos: chaos:", and the prefix of
// the package under the command is not repeated.
func TestErrorsSayItOnce(t *testing.T) {
	t.Parallel()
	commandtest.RequireUsageSaidOnce(t, inboxcli.Main, "inbox",
		[]string{"forget", "--consumer", "billing", "--id", "nope"},
		[]string{"purge", "--older-than", "3x"},
	)
}

// A command that needs the inbox tables, run where they are missing, names
// the database and the schema and says to run 'inbox migrate up'.
func TestMissingTables(t *testing.T) {
	t.Parallel()
	schema := testdb.Schema(t)
	env := map[string]string{"DATABASE_URL": testdb.URL(t)}
	sqlite := "sqlite:" + t.TempDir() + "/empty.db"
	id := "0190c8e4-7b3a-7cc1-9f00-2b7c4e1d9a55"
	// The database is named as the command names it: host:port/database.
	u, err := url.Parse(env["DATABASE_URL"])
	require.NoError(t, err)
	where := u.Host + u.Path
	for _, args := range [][]string{
		{"stats", "--schema", schema},
		{"purge", "--older-than", "30d", "--schema", schema},
		{"forget", "--consumer", "billing", "--id", id, "--schema", schema},
		{"deadletters", "list", "--schema", schema},
		{"deadletters", "show", "1", "--schema", schema},
		{"deadletters", "delete", "1", "--schema", schema},
		{"deadletters", "replay", "1", "--schema", schema},
		{"outbox", "list", "--schema", schema},
		{"outbox", "stats", "--schema", schema},
		{"outbox", "retry", id, "--schema", schema},
		{"partitions", "list", "--schema", schema},
		{"partitions", "premake", "--schema", schema},
		{"partitions", "adopt", "--dry-run", "--schema", schema},
		{"stats", "--database-url", sqlite},
		{"deadletters", "list", "--database-url", sqlite},
	} {
		code, stdout, stderr := run(t, env, args...)
		require.Equal(t, 1, code, "%v: %s", args, stderr)
		require.Empty(t, stdout, "%v", args)
		requireOneLine(t, stderr)
		// One hint, the same for every command: the store's own words in
		// parentheses, once.
		require.Regexp(t, `^inbox \w+: the inbox tables in .* are missing or not migrated to the latest version \([^()]*(\([^()]*\))?[^()]*\): run 'inbox migrate up' with the same flags\n$`, stderr, "%v", args)
		require.Equal(t, 1, strings.Count(stderr, "not migrated"), "%v: %s", args, stderr)
		if strings.HasPrefix(args[len(args)-1], "sqlite:") {
			require.Contains(t, stderr, "the database at "+strings.TrimPrefix(sqlite, "sqlite:"), "%v", args)
		} else {
			require.Contains(t, stderr, fmt.Sprintf("schema %q of the database at %s", schema, where), "%v", args)
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
	commandtest.RequireDocsCoverCommands(t, inboxcli.Main, "inbox", filepath.Join("..", "..", "..", "docs", "CLI.md"))
}
