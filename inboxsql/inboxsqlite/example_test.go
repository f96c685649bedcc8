package inboxsqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxmigrate"
	"github.com/txinbox/inbox/inboxsql"
	"github.com/txinbox/inbox/inboxsql/inboxsqlite"
)

// The embedded store: a SQLite file, the inbox tables, and a message
// delivered twice that is applied once.
func Example_sqlite() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "inbox-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	db, err := inboxsqlite.Open(filepath.Join(dir, "billing.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE accounts (id TEXT PRIMARY KEY, balance_cents INTEGER NOT NULL)`); err != nil {
		log.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO accounts VALUES ('acct-1', 0)`); err != nil {
		log.Fatal(err)
	}

	d, err := inboxsql.New(db, inboxsqlite.Engine, nil)
	if err != nil {
		log.Fatal(err)
	}
	m, err := inboxmigrate.New(d)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := m.Up(ctx); err != nil {
		log.Fatal(err)
	}
	client, err := inbox.NewClient(d, nil)
	if err != nil {
		log.Fatal(err)
	}

	credit := inbox.HandlerFunc[*sql.Tx](func(ctx context.Context, tx *sql.Tx, msg inbox.Message) error {
		_, err := tx.ExecContext(ctx, `UPDATE accounts SET balance_cents = balance_cents + 100 WHERE id = 'acct-1'`)
		return err
	})
	msg := inbox.Message{ID: "0190a2b4-6f6e-7c3a-9d1e-5b2f3c4d5e6f", Payload: []byte(`{"amount_cents":100}`)}
	for range 2 {
		outcome, err := client.Process(ctx, "billing", msg, credit)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(outcome)
	}
	var balance int
	if err := db.QueryRowContext(ctx, `SELECT balance_cents FROM accounts WHERE id = 'acct-1'`).Scan(&balance); err != nil {
		log.Fatal(err)
	}
	fmt.Println("balance:", balance)
	// Output:
	// applied
	// duplicate
	// balance: 100
}
