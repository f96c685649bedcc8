package inboxmigrate_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxmigrate"
)

// The partitioned layout renders the inbox partitioned by range over its
// ids, with no DEFAULT partition; the plain layout is unchanged.
func TestRenderPartitioned(t *testing.T) {
	t.Parallel()
	files, err := inboxmigrate.Render(inboxdriver.DialectPostgres, inboxdriver.Tables{Layout: inboxdriver.LayoutPartitioned}, inboxmigrate.FormatPlain)
	require.NoError(t, err)
	require.Len(t, files, 1)
	sql := files[0].Content
	require.Contains(t, sql, `PRIMARY KEY (consumer_name, message_id)
) PARTITION BY RANGE (message_id)`)
	require.Contains(t, sql, "inbox partitions premake")
	require.NotContains(t, sql, "DEFAULT PARTITION")
	require.NotContains(t, sql, "PARTITION OF")
	require.Contains(t, sql, `"inbox_dead_letters"`, "the other tables are the same")

	plain, err := inboxmigrate.Render(inboxdriver.DialectPostgres, inboxdriver.Tables{}, inboxmigrate.FormatPlain)
	require.NoError(t, err)
	require.NotContains(t, plain[0].Content, "PARTITION")
	require.Equal(t, strings.Count(plain[0].Content, "CREATE TABLE"), strings.Count(sql, "CREATE TABLE"))

	_, err = inboxmigrate.Render(inboxdriver.DialectMySQL, inboxdriver.Tables{Layout: inboxdriver.LayoutPartitioned}, inboxmigrate.FormatPlain)
	require.ErrorContains(t, err, "Postgres only")
}
