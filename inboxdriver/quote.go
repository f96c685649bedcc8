package inboxdriver

import (
	"fmt"
	"strings"
)

// maxIdentLen is the longest identifier, in bytes, of the strictest dialect
// (Postgres truncates longer ones silently, MySQL allows 64).
const maxIdentLen = 63

// Validate checks the table names of t, with defaults applied, for dialect d.
func (t Tables) Validate(d Dialect) error {
	t = t.WithDefaults()
	names := []struct{ field, value string }{
		{"Inbox", t.Inbox}, {"DeadLetters", t.DeadLetters},
		{"Effects", t.Effects}, {"Migrations", t.Migrations},
		{"Takeovers", t.Takeovers}, {"Outbox", t.Outbox}, {"OutboxKeys", t.OutboxKeys},
	}
	if t.Schema != "" {
		if d == DialectSQLite {
			return fmt.Errorf("inbox: Tables.Schema %q: SQLite has no schemas", t.Schema)
		}
		names = append(names, struct{ field, value string }{"Schema", t.Schema})
	}
	for _, n := range names {
		switch {
		case len(n.value) > maxIdentLen:
			return fmt.Errorf("inbox: Tables.%s %q is longer than %d bytes", n.field, n.value, maxIdentLen)
		case strings.ContainsRune(n.value, 0):
			return fmt.Errorf("inbox: Tables.%s contains a NUL byte", n.field)
		}
	}
	switch t.IDType {
	case IDTypeUUID, IDTypeText:
	default:
		return fmt.Errorf("inbox: Tables.IDType %q: want %q or %q", t.IDType, IDTypeUUID, IDTypeText)
	}
	return nil
}

// Quote quotes name as an identifier of dialect d.
func Quote(d Dialect, name string) string {
	if d == DialectMySQL {
		return "`" + strings.ReplaceAll(name, "`", "``") + "`"
	}
	return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
}

// Qualify quotes table, qualified with t.Schema when it is set.
func (t Tables) Qualify(d Dialect, table string) string {
	if t.Schema == "" {
		return Quote(d, table)
	}
	return Quote(d, t.Schema) + "." + Quote(d, table)
}
