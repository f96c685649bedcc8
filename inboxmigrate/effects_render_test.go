package inboxmigrate_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxmigrate"
)

// TestRenderEffects checks that migration 003 renders for every dialect,
// with the configured table name quoted and the id column of the
// configured type. The statements themselves were run against Postgres 15,
// MariaDB and SQLite when they were written; the stores' tests run them.
func TestRenderEffects(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		dialect   inboxdriver.Dialect
		idType    inboxdriver.IDType
		table, id string
	}{
		{inboxdriver.DialectPostgres, inboxdriver.IDTypeUUID, `"s"."my ledger"`, "message_id    uuid NOT NULL"},
		{inboxdriver.DialectPostgres, inboxdriver.IDTypeText, `"s"."my ledger"`, `message_id    text COLLATE "C" CHECK (octet_length(message_id) BETWEEN 1 AND 255) NOT NULL`},
		{inboxdriver.DialectMySQL, inboxdriver.IDTypeUUID, "`s`.`my ledger`", "message_id    CHAR(36) CHARACTER SET ascii COLLATE ascii_bin NOT NULL"},
		{inboxdriver.DialectMySQL, inboxdriver.IDTypeText, "`s`.`my ledger`", "message_id    VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL"},
		{inboxdriver.DialectSQLite, inboxdriver.IDTypeUUID, `"my ledger"`, "message_id    TEXT    NOT NULL"},
	} {
		t.Run(string(tc.dialect)+"/"+string(tc.idType), func(t *testing.T) {
			tables := inboxdriver.Tables{Schema: "s", Effects: "my ledger", IDType: tc.idType}
			if tc.dialect == inboxdriver.DialectSQLite {
				tables.Schema = ""
			}
			files, err := inboxmigrate.Render(tc.dialect, tables, inboxmigrate.FormatGolangMigrate)
			require.NoError(t, err)
			var up, down string
			for _, f := range files {
				switch f.Name {
				case "000003_inbox_effects.up.sql":
					up = f.Content
				case "000003_inbox_effects.down.sql":
					down = f.Content
				}
			}
			require.Contains(t, up, "CREATE TABLE IF NOT EXISTS "+tc.table+" (")
			require.Contains(t, up, tc.id)
			require.Contains(t, up, "PRIMARY KEY (consumer_name, message_id, step)")
			for _, col := range []string{"step", "state", "result", "attempts", "started_at", "done_at"} {
				require.True(t, strings.Contains(up, "\n    "+col+" "), "column %s in\n%s", col, up)
			}
			require.Equal(t, "DROP TABLE IF EXISTS "+tc.table+";\n", down)
		})
	}
	require.GreaterOrEqual(t, inboxmigrate.Latest(), 3)
}
