package inboxsql_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxmigrate"
	"github.com/txinbox/inbox/inboxsql"
	"github.com/txinbox/inbox/inboxtest"
)

// longTables are table names of the longest length every dialect takes: a
// derived index name left to the server would be cut to the table's own
// name on Postgres, and refused on MySQL.
func longTables(schema string) inboxdriver.Tables {
	const n = inboxdriver.MaxIdentLen
	return inboxdriver.Tables{
		Schema:      schema,
		Inbox:       "inbox_" + strings.Repeat("i", n-6),
		DeadLetters: "dead_letters_" + strings.Repeat("d", n-13),
		Effects:     "effects_" + strings.Repeat("e", n-8),
		Migrations:  "migrations_" + strings.Repeat("m", n-11),
	}
}

// indexNames lists the names of the indexes on table.
func indexNames(t *testing.T, db *sql.DB, d inboxsql.Dialect, tables inboxdriver.Tables, table string) []string {
	t.Helper()
	var rows *sql.Rows
	var err error
	ctx := context.Background()
	switch d {
	case inboxsql.SQLite:
		rows, err = db.QueryContext(ctx, `SELECT name FROM sqlite_schema WHERE type = 'index' AND tbl_name = ?`, table)
	case inboxsql.Postgres:
		rows, err = db.QueryContext(ctx, `SELECT indexname FROM pg_indexes WHERE schemaname = $1 AND tablename = $2`, tables.Schema, table)
	default:
		rows, err = db.QueryContext(ctx, `SELECT DISTINCT index_name FROM information_schema.STATISTICS
 WHERE table_schema = COALESCE(NULLIF(?, ''), DATABASE()) AND table_name = ?`, tables.Schema, table)
	}
	require.NoError(t, err)
	defer rows.Close()
	var names []string
	for rows.Next() {
		var name string
		require.NoError(t, rows.Scan(&name))
		names = append(names, name)
	}
	require.NoError(t, rows.Err())
	return names
}

// TestLongTableNames: tables named with the longest names allowed migrate
// up on every engine, each with the indexes it should have, and work.
func TestLongTableNames(t *testing.T) {
	for _, e := range engines {
		if e.effectsDB != nil {
			continue
		}
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			db, base := e.open(t)
			tables := longTables(base.Schema)
			d, err := inboxsql.New(db, engineOf(e.dialect), &inboxsql.Config{Tables: tables})
			require.NoError(t, err)
			m, err := inboxmigrate.New(d)
			require.NoError(t, err)
			ctx := context.Background()
			_, err = m.Up(ctx)
			require.NoError(t, err, "migrate up with %d-byte table names", inboxdriver.MaxIdentLen)

			require.Contains(t, indexNames(t, db, e.dialect, tables, tables.Inbox),
				inboxdriver.IndexName(tables.Inbox, inboxdriver.IndexInboxProcessedAt), "the purge's index on the inbox")
			effectsIndex := inboxdriver.IndexEffectsStateStarted
			if e.dialect == inboxsql.Postgres {
				effectsIndex = inboxdriver.IndexEffectsStarted
			}
			require.Contains(t, indexNames(t, db, e.dialect, tables, tables.Effects),
				inboxdriver.IndexName(tables.Effects, effectsIndex), "the ledger's index of started steps")

			c, err := inbox.NewClient(d, nil)
			require.NoError(t, err)
			noop := inbox.HandlerFunc[*sql.Tx](func(context.Context, *sql.Tx, inbox.Message) error { return nil })
			id := inboxtest.NewID()
			inboxtest.RequireApplied(t)(c.Process(ctx, "billing", inbox.Message{ID: id}, noop))
			inboxtest.RequireDuplicate(t)(c.Process(ctx, "billing", inbox.Message{ID: id}, noop))
			require.NoError(t, c.DeadLetter(ctx, inbox.DeadLetterParams{Consumer: "billing", Message: inbox.Message{ID: inboxtest.NewID()}, Reason: inbox.ReasonPermanent}))
			_, err = c.Admin().Purge(ctx, inbox.PurgeParams{OlderThan: inbox.DefaultReplayHorizon})
			require.NoError(t, err)
		})
	}
}
