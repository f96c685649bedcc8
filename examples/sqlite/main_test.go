package main

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox/inboxsql/inboxsqlite"
)

// The quick start, run twice on one file: the second delivery of the event
// is a duplicate, and so is every delivery of the second run.
func TestQuickStart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "quickstart.db")
	var out bytes.Buffer
	require.NoError(t, run(ctx, &out, path))
	require.Equal(t, "applied\nduplicate\nbalance: 2500 cents\n", out.String())
	out.Reset()
	require.NoError(t, run(ctx, &out, path))
	require.Equal(t, "duplicate\nduplicate\nbalance: 2500 cents\n", out.String())

	db, err := inboxsqlite.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	var balance int64
	var rows int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT balance_cents FROM accounts WHERE id = 1`).Scan(&balance))
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM inbox WHERE consumer_name = 'billing'`).Scan(&rows))
	require.Equal(t, int64(2500), balance)
	require.Equal(t, 1, rows, "one inbox row for the one event")
}
