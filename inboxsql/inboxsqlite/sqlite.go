// Package inboxsqlite is the SQLite engine of the inbox's database/sql
// store, through modernc.org/sqlite (pure Go, no cgo): importing it
// registers that driver as "sqlite", and nothing else.
//
//	db, err := inboxsqlite.Open("inbox.db")
//	if err != nil { ... }
//	d, err := inboxsql.New(db, inboxsqlite.Engine, nil)
//
// See package inboxsql for the store itself.
package inboxsqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxsql"
)

// Engine is SQLite through modernc.org/sqlite, for inboxsql.New. Any
// database/sql driver for SQLite whose errors have a Code() int method
// works with it too, once registered under a name of its own.
var Engine inboxsql.Engine = engine{}

type engine struct{}

func (engine) Dialect() inboxsql.Dialect { return inboxsql.SQLite }

// Classify leaves SQLite's errors to the store, which reads their result
// codes through their Code method.
func (engine) Classify(error) inboxdriver.ErrorClass { return inboxdriver.ClassOther }

// DuplicateKey is not asked on SQLite, whose claims use ON CONFLICT.
func (engine) DuplicateKey(error) bool { return false }

// Open opens the SQLite database file at path, creating it if need be,
// with the settings the store needs:
//
//   - journal_mode=WAL: readers do not block the writer, nor it them;
//   - busy_timeout=inboxsql.DefaultSQLiteBusyTimeout: a connection waits
//     for a lock rather than failing at once with SQLITE_BUSY;
//   - synchronous=FULL: a commit is on disk before it returns, so a message
//     is never acked for a commit that a power cut can undo;
//   - BEGIN IMMEDIATE (_txlock=immediate) for every read-write transaction:
//     a transaction takes the write lock when it begins, waiting for it
//     under the busy timeout, so that it cannot fail halfway with
//     SQLITE_BUSY_SNAPSHOT when it first writes after another connection
//     did.
//
// path is a file path, or a "file:" URI whose parameters are kept. An
// in-memory database is refused: each connection of the pool would see its
// own. The returned *sql.DB is the application's too: use it for the
// handlers' own statements, through the transaction they receive.
func Open(path string) (*sql.DB, error) {
	dsn, err := dsn(path)
	if err != nil {
		return nil, err
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var mode string
	if err := db.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode); err != nil {
		db.Close()
		return nil, fmt.Errorf("inboxsqlite: open %s: %w", path, err)
	}
	if !strings.EqualFold(mode, "wal") {
		db.Close()
		return nil, fmt.Errorf("inboxsqlite: open %s: journal mode is %q, not WAL", path, mode)
	}
	return db, nil
}

func dsn(path string) (string, error) {
	params := fmt.Sprintf("_pragma=busy_timeout(%d)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_txlock=immediate",
		inboxsql.DefaultSQLiteBusyTimeout.Milliseconds())
	rest, isURI := strings.CutPrefix(path, "file:")
	name, query, _ := strings.Cut(rest, "?")
	switch {
	case path == "" || name == "":
		return "", errors.New("inboxsqlite: Open: the path is empty")
	case name == ":memory:" || strings.Contains(query, "mode=memory"):
		return "", fmt.Errorf("inboxsqlite: Open %q: an in-memory database is private to one connection of the pool: use a file", path)
	case !isURI && query != "":
		return "", fmt.Errorf("inboxsqlite: Open %q: a path with '?' must be written as a file: URI", path)
	}
	if query != "" {
		return path + "&" + params, nil
	}
	return path + "?" + params, nil
}
