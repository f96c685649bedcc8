package inboxsql_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxmigrate"
	"github.com/txinbox/inbox/inboxsql"
)

// Migration 005 adds a column. MySQL commits DDL at once, so a run can die
// after the ALTER and before the version row: the next Up must see the
// column and record the version, and a Down whose column is already gone
// must still record its step. Postgres says IF [NOT] EXISTS. (SQLite's DDL
// is transactional: the column and its version row commit together.)
func TestReplayColumnMigrationRunsAgain(t *testing.T) {
	t.Parallel()
	for _, e := range engines {
		if e.dialect == inboxsql.SQLite {
			continue
		}
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			d, tables := e.newDriver(t)
			db := d.DB()
			m, err := inboxmigrate.New(d)
			require.NoError(t, err)
			versions := tables.Qualify(d.Dialect(), tables.Migrations)
			deadLetters := tables.Qualify(d.Dialect(), tables.DeadLetters)
			const v = 5

			// Made, not recorded: Up records it without failing.
			_, err = db.ExecContext(ctx, fmt.Sprintf(`DELETE FROM %s WHERE version = %d`, versions, v))
			require.NoError(t, err)
			done, err := m.Up(ctx)
			require.NoError(t, err)
			require.Len(t, done, 1)
			require.Equal(t, v, done[0].Version)

			c, err := inbox.NewClient[*sql.Tx](d, nil)
			require.NoError(t, err)
			_, err = c.Admin().DeadLetterReplay(ctx, inbox.DeadLetterReplayParams{Consumer: "billing"})
			require.NoError(t, err, "the column is there")

			// Undone, not recorded: Down records it without failing.
			_, err = db.ExecContext(ctx, `ALTER TABLE `+deadLetters+` DROP COLUMN replay_requested_at`)
			require.NoError(t, err)
			undone, err := m.Down(ctx, v-1)
			require.NoError(t, err)
			// The later migrations go first; this one is undone last.
			require.NotEmpty(t, undone)
			require.Equal(t, v, undone[len(undone)-1].Version)
			cur, err := m.Current(ctx)
			require.NoError(t, err)
			require.Equal(t, v-1, cur)

			// And up again, for real.
			_, err = m.Up(ctx)
			require.NoError(t, err)
			_, err = c.Admin().DeadLetterReplay(ctx, inbox.DeadLetterReplayParams{Consumer: "billing"})
			require.NoError(t, err)
		})
	}
}

var _ inboxdriver.ReplayStore = (*inboxsql.Driver)(nil)
