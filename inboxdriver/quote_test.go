package inboxdriver_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox/inboxdriver"
)

func TestValidateRefusesTablesThatShareAName(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		tables  inboxdriver.Tables
		dialect inboxdriver.Dialect
		want    string
	}{
		{"inbox and dead letters", inboxdriver.Tables{Inbox: "msgs", DeadLetters: "msgs"}, inboxdriver.DialectPostgres,
			`Tables.Inbox and Tables.DeadLetters are both "msgs"`},
		{"a default name taken", inboxdriver.Tables{Effects: "inbox"}, inboxdriver.DialectSQLite,
			`Tables.Inbox and Tables.Effects are both "inbox"`},
		{"migrations", inboxdriver.Tables{DeadLetters: "x", Migrations: "x"}, inboxdriver.DialectMySQL,
			`Tables.DeadLetters and Tables.Migrations are both "x"`},
		{"takeovers", inboxdriver.Tables{Takeovers: "inbox_dead_letters"}, inboxdriver.DialectPostgres,
			`Tables.DeadLetters and Tables.Takeovers are both "inbox_dead_letters"`},
		{"an index's name on takeovers", inboxdriver.Tables{Takeovers: "inbox_processed_at_idx"}, inboxdriver.DialectSQLite,
			`Tables.Takeovers "inbox_processed_at_idx" is the name of the index on Tables.Inbox`},
		{"case on MySQL", inboxdriver.Tables{Inbox: "Inbox", DeadLetters: "inbox"}, inboxdriver.DialectMySQL,
			`are both "Inbox"`},
		{"an index's name", inboxdriver.Tables{Inbox: "a", Effects: "a_processed_at_idx"}, inboxdriver.DialectPostgres,
			`Tables.Effects "a_processed_at_idx" is the name of the index on Tables.Inbox`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			require.ErrorContains(t, tt.tables.Validate(tt.dialect), tt.want)
		})
	}
	// Names equal but for case are distinct tables on Postgres.
	require.NoError(t, inboxdriver.Tables{Inbox: "Inbox", DeadLetters: "inbox"}.Validate(inboxdriver.DialectPostgres))
	require.ErrorContains(t, inboxdriver.Tables{Inbox: strings.Repeat("x", 64)}.Validate(inboxdriver.DialectPostgres),
		"Tables.Inbox", "longer than 63 bytes")
}

func TestIndexNameAlwaysFits(t *testing.T) {
	t.Parallel()
	require.Equal(t, "inbox_processed_at_idx", inboxdriver.IndexName("inbox", inboxdriver.IndexInboxProcessedAt),
		"a name that fits is the table's name and the suffix, as before")
	seen := map[string]string{}
	for _, table := range []string{
		strings.Repeat("a", 46), strings.Repeat("a", 47), strings.Repeat("a", 48),
		strings.Repeat("a", 62), strings.Repeat("a", 63), strings.Repeat("a", 62) + "b",
		strings.Repeat("é", 31) + "x", // two-byte characters: a cut must not split one
	} {
		for _, suffix := range []string{inboxdriver.IndexInboxProcessedAt, inboxdriver.IndexEffectsStateStarted} {
			name := inboxdriver.IndexName(table, suffix)
			require.LessOrEqual(t, len(name), inboxdriver.MaxIdentLen, "%s: %s", table, name)
			require.True(t, strings.HasSuffix(name, "_"+suffix), name)
			require.NotEqual(t, table, name)
			require.True(t, strings.ToValidUTF8(name, "?") == name, "invalid UTF-8: %q", name)
			if other, ok := seen[name]; ok {
				t.Fatalf("tables %q and %q get the same index name %q", other, table, name)
			}
			seen[name] = table
			require.Equal(t, name, inboxdriver.IndexName(table, suffix), "derived the same way every time")
		}
	}
}
