package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver testdb creates schemas with

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/internal/readme"
	"github.com/txinbox/inbox/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// schemaURL returns a URL of the test database whose search_path is a fresh
// schema, dropped when t ends: the quick start creates its tables there.
func schemaURL(t *testing.T) string {
	schema := testdb.Schema(t)
	u := testdb.URL(t)
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	return u + sep + "search_path=" + schema
}

func balance(t *testing.T, pool *pgxpool.Pool) int64 {
	var b int64
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT balance_cents FROM accounts WHERE id = 1`).Scan(&b))
	return b
}

// The quick start, run twice on one database: the second delivery of the
// event is a duplicate, and so is every delivery of the second run.
func TestQuickStart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := schemaURL(t)
	var out bytes.Buffer
	require.NoError(t, run(ctx, &out, url))
	want, err := readme.Output("../../README.md", "examples/pgx")
	require.NoError(t, err)
	require.Equal(t, want, out.String(), "the README shows what the quick start prints")
	require.Equal(t, "applied\nduplicate\nbalance: 2500 cents\n", out.String())
	out.Reset()
	require.NoError(t, run(ctx, &out, url))
	require.Equal(t, "duplicate\nduplicate\nbalance: 2500 cents\n", out.String())

	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.Equal(t, int64(2500), balance(t, pool))
	var rows int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM inbox WHERE consumer_name = 'billing'`).Scan(&rows))
	require.Equal(t, 1, rows, "one inbox row for the one event")
}

// The README's pipelined handler, on the quick start's tables.
func TestPipelined(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := schemaURL(t)
	require.NoError(t, run(ctx, &bytes.Buffer{}, url))
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	driver, err := inboxpgx.New(pool, nil)
	require.NoError(t, err)
	client, err := inbox.NewClient(driver, nil)
	require.NoError(t, err)
	id, body := "0190c8e5-02d1-7a4e-8b11-6f0c2a9d3e77", []byte(`{"account":1,"amount_cents":100}`)

	for _, want := range []inbox.Outcome{inbox.Applied, inbox.Duplicate} {
		// README: begin pipelined
		credit := inboxpgx.PipelineFunc(func(ctx context.Context, msg inbox.Message, b *pgx.Batch) error {
			b.Queue(`UPDATE accounts SET balance_cents = balance_cents + $1 WHERE id = $2`, 100, 1)
			return nil
		})
		outcome, err := client.Process(ctx, "billing", inbox.Message{ID: id, Payload: body}, credit)
		// README: end pipelined
		require.NoError(t, err)
		require.Equal(t, want, outcome)
	}
	require.Equal(t, int64(2600), balance(t, pool), "the quick start's 2500, and 100 once")
}
