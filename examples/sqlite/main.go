// Command sqlite is the quick start on SQLite, the embedded store: no server,
// one file. A handler credits an account, and the broker delivers an event
// twice.
//
//	go run . [FILE]    # default: inbox-quickstart.db in the temporary directory
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxmigrate"
	"github.com/txinbox/inbox/inboxsql"
	"github.com/txinbox/inbox/inboxsql/inboxsqlite"
)

func main() {
	// Not in the working directory: a run from a checkout leaves nothing
	// in it.
	path := filepath.Join(os.TempDir(), "inbox-quickstart.db")
	if len(os.Args) > 1 {
		path = os.Args[1]
	}
	if err := run(context.Background(), os.Stdout, path); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, w io.Writer, path string) error {
	// README: begin store
	// One SQLite file holds the inbox tables and the application's own.
	db, err := inboxsqlite.Open(path)
	if err != nil {
		return err
	}
	defer db.Close()
	driver, err := inboxsql.New(db, inboxsqlite.Engine, nil)
	if err != nil {
		return err
	}
	migrator, err := inboxmigrate.New(driver)
	if err != nil {
		return err
	}
	if _, err := migrator.Up(ctx); err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS accounts (id INTEGER PRIMARY KEY, balance_cents INTEGER NOT NULL)`); err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, `INSERT OR IGNORE INTO accounts VALUES (1, 0)`); err != nil {
		return err
	}
	client, err := inbox.NewClient(driver, nil)
	if err != nil {
		return err
	}

	// The handler gets the store's own transaction: a *sql.Tx.
	credit := inbox.HandlerFunc[*sql.Tx](func(ctx context.Context, tx *sql.Tx, msg inbox.Message) error {
		var order struct {
			Account     int64 `json:"account"`
			AmountCents int64 `json:"amount_cents"`
		}
		if err := json.Unmarshal(msg.Payload, &order); err != nil {
			return inbox.Permanent(err)
		}
		_, err := tx.ExecContext(ctx, `UPDATE accounts SET balance_cents = balance_cents + ? WHERE id = ?`,
			order.AmountCents, order.Account)
		return err
	})
	// README: end store

	// The producer's event id, a UUID by default, delivered twice.
	msg := inbox.Message{
		ID:      "0190c8e4-7b3a-7cc1-9f00-2b7c4e1d9a55",
		Payload: []byte(`{"account":1,"amount_cents":2500}`),
	}
	for range 2 {
		outcome, err := client.Process(ctx, "billing", msg, credit)
		if err != nil {
			return err
		}
		fmt.Fprintln(w, outcome) // applied, then duplicate
	}

	var balance int64
	if err := db.QueryRowContext(ctx, `SELECT balance_cents FROM accounts WHERE id = 1`).Scan(&balance); err != nil {
		return err
	}
	fmt.Fprintf(w, "balance: %d cents\n", balance)
	return nil
}
