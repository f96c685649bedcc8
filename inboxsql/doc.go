// Package inboxsql is the inbox's store over database/sql, with one dialect
// per engine: SQLite (modernc.org/sqlite, pure Go: the embedded default),
// Postgres (pgx's stdlib), and MySQL or MariaDB (go-sql-driver/mysql).
// Handlers receive the *sql.Tx of the message's transaction.
//
// This package needs only the standard library. Each engine lives in a
// package, and a module, of its own, which registers its database/sql
// driver: a program links, and registers, only the engines it imports.
//
//	db, err := inboxsqlite.Open("inbox.db")
//	if err != nil { ... }
//	d, err := inboxsql.New(db, inboxsqlite.Engine, nil)
//	if err != nil { ... }
//	m, err := inboxmigrate.New(d)
//	if err != nil { ... }
//	if _, err := m.Up(ctx); err != nil { ... }
//	client, err := inbox.NewClient(d, nil)
//	if err != nil { ... }
//	outcome, err := client.Process(ctx, "billing", msg, inbox.HandlerFunc[*sql.Tx](
//		func(ctx context.Context, tx *sql.Tx, m inbox.Message) error {
//			_, err := tx.ExecContext(ctx, `UPDATE accounts SET balance_cents = balance_cents + ? WHERE id = ?`, 100, "acct-1")
//			return err
//		}))
//
// The tables come from package inboxmigrate, rendered for the dialect.
package inboxsql
