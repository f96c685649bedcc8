// Package pgexec picks pgx's exec mode for the commands (inbox, inboxlab)
// that build their own pool from a URL a user gives: one that works behind
// a transaction pooler, unless the URL names one itself.
package pgexec

import (
	"net/url"
	"strings"
)

// PoolerSafe is the exec mode the commands use unless the URL names one:
// pgx's cache_describe. It works behind a transaction pooler (PgBouncer's
// pool_mode=transaction), which gives each transaction a server connection
// of its choosing: it uses only the unnamed statement, so nothing is left
// on a server connection, and it learns each statement's parameter types
// once per connection, so arguments keep their binary encoding. pgx's
// default, cache_statement, prepares named statements on one server
// connection and expects them on the next: behind a transaction pooler it
// fails with 'prepared statement "stmtcache_…" already exists' (42P05) or
// 'does not exist' (26000).
const PoolerSafe = "cache_describe"

// Param is the connection-string parameter that names pgx's exec mode.
const Param = "default_query_exec_mode"

// Names reports whether a Postgres URL or keyword/value string names an
// exec mode.
func Names(raw string) bool {
	if u, err := url.Parse(raw); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		return u.Query().Has(Param)
	}
	return strings.Contains(raw, Param)
}

// WithPoolerSafe returns raw, a postgres:// URL or a keyword/value string
// (empty: the PG* variables), naming PoolerSafe unless it names a mode.
func WithPoolerSafe(raw string) string {
	if Names(raw) {
		return raw
	}
	if u, err := url.Parse(raw); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		q := u.Query()
		q.Set(Param, PoolerSafe)
		u.RawQuery = q.Encode()
		return u.String()
	}
	if strings.TrimSpace(raw) == "" {
		return Param + "=" + PoolerSafe
	}
	return raw + " " + Param + "=" + PoolerSafe
}
