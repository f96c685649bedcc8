package inboxpgx_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxmigrate"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/internal/testdb"
)

func newMigrator(t *testing.T, tables inboxdriver.Tables) (*inboxmigrate.Migrator, *inboxpgx.Driver) {
	t.Helper()
	d, err := inboxpgx.New(testPool(t), &inboxpgx.Config{Tables: tables})
	require.NoError(t, err)
	m, err := inboxmigrate.New(d)
	require.NoError(t, err)
	return m, d
}

func tableExists(t *testing.T, d *inboxpgx.Driver, schema, table string) bool {
	t.Helper()
	var ok bool
	require.NoError(t, d.Pool().QueryRow(context.Background(),
		`SELECT EXISTS (SELECT 1 FROM information_schema.tables WHERE table_schema = $1 AND table_name = $2)`,
		schema, table).Scan(&ok))
	return ok
}

func TestUpIsIdempotentAndDownReverts(t *testing.T) {
	t.Parallel()
	schema := testdb.Schema(t)
	m, d := newMigrator(t, inboxdriver.Tables{Schema: schema})
	ctx := context.Background()

	done, err := m.Up(ctx)
	require.NoError(t, err)
	require.Len(t, done, inboxmigrate.Latest())
	done, err = m.Up(ctx)
	require.NoError(t, err)
	require.Empty(t, done, "a second Up applies nothing")
	require.True(t, tableExists(t, d, schema, "inbox"))
	require.True(t, tableExists(t, d, schema, "inbox_dead_letters"))
	cur, err := m.Current(ctx)
	require.NoError(t, err)
	require.Equal(t, inboxmigrate.Latest(), cur)

	down, err := m.Down(ctx, 1)
	require.NoError(t, err)
	require.Len(t, down, inboxmigrate.Latest()-1)
	require.False(t, tableExists(t, d, schema, "inbox_dead_letters"))
	require.True(t, tableExists(t, d, schema, "inbox"))
	st, err := m.Status(ctx)
	require.NoError(t, err)
	require.True(t, st[0].Applied)
	require.False(t, st[1].Applied)

	_, err = m.Down(ctx, 0)
	require.NoError(t, err)
	require.False(t, tableExists(t, d, schema, "inbox"))
	done, err = m.Up(ctx)
	require.NoError(t, err)
	require.Len(t, done, inboxmigrate.Latest())
}

// Migrators racing on the same tables apply each migration once.
func TestConcurrentMigrators(t *testing.T) {
	t.Parallel()
	schema := testdb.Schema(t)
	var wg sync.WaitGroup
	applied := make([]int, 6)
	errs := make([]error, 6)
	for i := range applied {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, _ := newMigrator(t, inboxdriver.Tables{Schema: schema})
			done, err := m.Up(context.Background())
			applied[i], errs[i] = len(done), err
		}()
	}
	wg.Wait()
	total := 0
	for i := range applied {
		require.NoError(t, errs[i])
		total += applied[i]
	}
	require.Equal(t, inboxmigrate.Latest(), total, "each migration applied by exactly one migrator")
}

// Odd table names are quoted everywhere, and the store works on them.
func TestQuotedNames(t *testing.T) {
	t.Parallel()
	schema := testdb.Schema(t)
	tables := inboxdriver.Tables{Schema: schema, Inbox: `In"box; DROP TABLE x`, DeadLetters: "dead letters", Migrations: "Versions"}
	m, d := newMigrator(t, tables)
	_, err := m.Up(context.Background())
	require.NoError(t, err)
	require.True(t, tableExists(t, d, schema, `In"box; DROP TABLE x`))
	var n int
	require.NoError(t, d.Pool().QueryRow(context.Background(),
		`SELECT count(*) FROM `+pgx.Identifier{schema, "Versions"}.Sanitize()).Scan(&n))
	require.Equal(t, inboxmigrate.Latest(), n)
}

func TestRender(t *testing.T) {
	t.Parallel()
	tables := inboxdriver.Tables{Schema: "app", Inbox: "in`box"}
	for _, d := range []inboxdriver.Dialect{inboxdriver.DialectPostgres, inboxdriver.DialectMySQL} {
		files, err := inboxmigrate.Render(d, tables, inboxmigrate.FormatPlain)
		require.NoError(t, err)
		require.Len(t, files, 1)
		sql := files[0].Content
		if d == inboxdriver.DialectPostgres {
			require.Contains(t, sql, `CREATE TABLE IF NOT EXISTS "app"."in`+"`"+`box"`)
			require.Contains(t, sql, "USING brin (processed_at)")
		} else {
			require.Contains(t, sql, "CREATE TABLE IF NOT EXISTS `app`.`in``box`")
		}
	}
	_, err := inboxmigrate.Render(inboxdriver.DialectSQLite, tables, inboxmigrate.FormatPlain)
	require.ErrorContains(t, err, "SQLite has no schemas")

	goose, err := inboxmigrate.Render(inboxdriver.DialectPostgres, inboxdriver.Tables{}, inboxmigrate.FormatGoose)
	require.NoError(t, err)
	require.Len(t, goose, inboxmigrate.Latest())
	require.Equal(t, "00001_inbox_inbox.sql", goose[0].Name)
	require.True(t, strings.HasPrefix(goose[0].Content, "-- +goose Up\n"))
	require.Contains(t, goose[0].Content, "-- +goose Down\nDROP TABLE IF EXISTS \"inbox\";")

	gm, err := inboxmigrate.Render(inboxdriver.DialectSQLite, inboxdriver.Tables{}, inboxmigrate.FormatGolangMigrate)
	require.NoError(t, err)
	require.Len(t, gm, 2*inboxmigrate.Latest())
	require.Equal(t, "000001_inbox_inbox.up.sql", gm[0].Name)
	require.Equal(t, "000001_inbox_inbox.down.sql", gm[1].Name)
	require.Contains(t, gm[0].Content, "WITHOUT ROWID")

	_, err = inboxmigrate.Render("oracle", inboxdriver.Tables{}, inboxmigrate.FormatPlain)
	require.ErrorContains(t, err, "unknown dialect")
	_, err = inboxmigrate.Render(inboxdriver.DialectPostgres, inboxdriver.Tables{}, "flyway")
	require.ErrorContains(t, err, "unknown migration format")
	_, err = inboxmigrate.Render(inboxdriver.DialectPostgres, inboxdriver.Tables{Inbox: strings.Repeat("x", 64)}, inboxmigrate.FormatPlain)
	require.ErrorContains(t, err, "longer than 63 bytes")
}

// Two tables with one name would make every dead letter fail, and a
// record retry forever: New refuses them.
func TestNewRefusesTablesThatShareAName(t *testing.T) {
	t.Parallel()
	_, err := inboxpgx.New(testPool(t), &inboxpgx.Config{Tables: inboxdriver.Tables{DeadLetters: "inbox"}})
	require.ErrorContains(t, err, `Tables.Inbox and Tables.DeadLetters are both "inbox"`)
}
