package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver testdb creates schemas with

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox/internal/readme"
	"github.com/txinbox/inbox/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// The quick start on an in-process Kafka: the event published twice is
// applied once, at its first offset, and the other event once.
func TestQuickStart(t *testing.T) {
	t.Parallel()
	schema := testdb.Schema(t)
	url := testdb.URL(t)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	url += sep + "search_path=" + schema
	// A bound on a run that cannot finish, so that it fails instead of
	// hanging; not a measure of time.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var out bytes.Buffer
	require.NoError(t, run(ctx, &out, url, ""))
	want, err := readme.Output("../../README.md", "examples/kafka")
	require.NoError(t, err)
	require.Equal(t, want, out.String(), "the README shows what the quick start prints")
	require.Equal(t, "offset 0: applied\noffset 1: duplicate\noffset 2: applied\nbalance of account 2: 3500 cents\n", out.String())

	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	var balance int64
	var rows int
	require.NoError(t, pool.QueryRow(ctx, `SELECT balance_cents FROM accounts WHERE id = 2`).Scan(&balance))
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM inbox WHERE consumer_name = 'billing'`).Scan(&rows))
	require.Equal(t, int64(3500), balance)
	require.Equal(t, 2, rows, "one inbox row per distinct event")
}
