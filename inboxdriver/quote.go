package inboxdriver

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxIdentLen is the longest identifier, in bytes, of the strictest dialect:
// Postgres truncates longer ones silently (NAMEDATALEN - 1), and MySQL
// refuses names over 64 characters. Table names, and the index names
// derived from them (IndexName), are kept within it.
const MaxIdentLen = 63

// Validate checks the table names of t, with defaults applied, for dialect
// d: each fits MaxIdentLen and is UTF-8 without a NUL byte, no two tables share a
// name, and no table takes the name of an index the migrations derive.
func (t Tables) Validate(d Dialect) error {
	t = t.WithDefaults()
	names := t.named()
	if t.Schema != "" {
		if d == DialectSQLite {
			return fmt.Errorf("inbox: Tables.Schema %q: SQLite has no schemas", t.Schema)
		}
		names = append(names, namedTable{"Schema", t.Schema})
	}
	for _, n := range names {
		switch {
		case len(n.value) > MaxIdentLen:
			return fmt.Errorf("inbox: Tables.%s %q is longer than %d bytes", n.field, n.value, MaxIdentLen)
		case strings.ContainsRune(n.value, 0):
			return fmt.Errorf("inbox: Tables.%s contains a NUL byte", n.field)
		case !utf8.ValidString(n.value):
			return fmt.Errorf("inbox: Tables.%s %q is not valid UTF-8", n.field, n.value)
		}
	}
	tables := t.named()
	for i, a := range tables {
		for _, b := range tables[i+1:] {
			// MySQL folds table names to lower case on some platforms
			// (lower_case_table_names): names equal but for case clash
			// there.
			if a.value == b.value || (d == DialectMySQL && strings.EqualFold(a.value, b.value)) {
				return fmt.Errorf("inbox: Tables.%s and Tables.%s are both %q: each table needs a name of its own", a.field, b.field, a.value)
			}
		}
	}
	for _, idx := range t.indexes() {
		for _, tb := range tables {
			if idx.name == tb.value {
				return fmt.Errorf("inbox: Tables.%s %q is the name of the index on Tables.%s: choose another name", tb.field, tb.value, idx.on)
			}
		}
	}
	switch t.IDType {
	case IDTypeUUID, IDTypeText:
	default:
		return fmt.Errorf("inbox: Tables.IDType %q: want %q or %q", t.IDType, IDTypeUUID, IDTypeText)
	}
	return t.validateLayout(d)
}

type namedTable struct{ field, value string }

// named lists the table names of t, which has its defaults.
func (t Tables) named() []namedTable {
	return []namedTable{
		{"Inbox", t.Inbox}, {"DeadLetters", t.DeadLetters},
		{"Effects", t.Effects}, {"Migrations", t.Migrations},
		{"Takeovers", t.Takeovers}, {"Outbox", t.Outbox}, {"OutboxKeys", t.OutboxKeys},
	}
}

// Suffixes of the index names that the migrations derive with IndexName.
const (
	IndexInboxProcessedAt    = "processed_at_idx"
	IndexEffectsStarted      = "started_idx"
	IndexEffectsStateStarted = "state_started_idx"
	IndexDeadLettersDedupKey = "dedup_key"
)

// indexTagLen is the number of hex digits of the table name's hash in a
// shortened index name.
const indexTagLen = 8

// indexes lists the index names the migrations derive from t's names, in
// every dialect, with the field of the table each is on.
func (t Tables) indexes() []struct{ name, on string } {
	return []struct{ name, on string }{
		{IndexName(t.Inbox, IndexInboxProcessedAt), "Inbox"},
		{IndexName(t.Effects, IndexEffectsStarted), "Effects"},
		{IndexName(t.Effects, IndexEffectsStateStarted), "Effects"},
		{IndexName(t.DeadLetters, IndexDeadLettersDedupKey), "DeadLetters"},
	}
}

// IndexName derives the name of an index on table: table_suffix when that
// fits MaxIdentLen, or else a prefix of table, a hash of the whole name and
// the suffix, so that the name always fits, differs from the table's own
// name and from the index of any other table. (Left to Postgres, a long name
// is truncated to 63 bytes, which can make it the table's own name.)
func IndexName(table, suffix string) string {
	name := table + "_" + suffix
	if len(name) <= MaxIdentLen {
		return name
	}
	sum := sha256.Sum256([]byte(table))
	tag := hex.EncodeToString(sum[:])[:indexTagLen]
	keep := MaxIdentLen - len(suffix) - len(tag) - 2
	keep = max(min(keep, len(table)), 0)
	for keep > 0 && keep < len(table) && !utf8.RuneStart(table[keep]) {
		keep-- // do not cut a character in two
	}
	return table[:keep] + "_" + tag + "_" + suffix
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
