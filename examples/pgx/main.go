// Command pgx is the quick start on Postgres with pgx: a handler that credits
// an account, and an event that the broker delivers twice.
//
//	DATABASE_URL=postgres://postgres@localhost:5432/postgres go run .
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxmigrate"
	"github.com/txinbox/inbox/inboxpgx"
)

func main() {
	if err := run(context.Background(), os.Stdout, os.Getenv("DATABASE_URL")); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, w io.Writer, databaseURL string) error {
	pool, err := pgxpool.New(ctx, databaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()

	// The inbox tables (or run 'inbox migrate up'), then the application's own.
	driver, err := inboxpgx.New(pool, nil)
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
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS accounts (id bigint PRIMARY KEY, balance_cents bigint NOT NULL);
INSERT INTO accounts VALUES (1, 0) ON CONFLICT DO NOTHING`); err != nil {
		return err
	}
	client, err := inbox.NewClient(driver, nil)
	if err != nil {
		return err
	}

	// The side effect, in the same transaction as the inbox row.
	credit := inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
		var order struct {
			Account     int64 `json:"account"`
			AmountCents int64 `json:"amount_cents"`
		}
		if err := json.Unmarshal(msg.Payload, &order); err != nil {
			return inbox.Permanent(err) // no retry fixes a bad payload: dead-letter it
		}
		_, err := tx.Exec(ctx, `UPDATE accounts SET balance_cents = balance_cents + $1 WHERE id = $2`,
			order.AmountCents, order.Account)
		return err
	})

	// A delivery as your broker hands it over. The id is the producer's
	// event id, the same on every delivery: by default it must be a UUID
	// (any version). For ULIDs or opaque strings, see inbox.Config.IDFormat.
	delivery := inbox.Message{
		Headers: map[string]string{"event-id": "0190c8e4-7b3a-7cc1-9f00-2b7c4e1d9a55"},
		Payload: []byte(`{"account":1,"amount_cents":2500}`),
	}
	// The consumer crashed before its ack, so the broker delivers it again.
	for range 2 {
		id, err := inbox.HeaderKey("event-id")(delivery)
		if err != nil {
			return err // no id: never apply it; dead-letter it and ack
		}
		msg := delivery
		msg.ID = id
		outcome, err := client.Process(ctx, "billing", msg, credit)
		if err != nil {
			return err // do not ack: the broker redelivers, and the inbox makes that safe
		}
		fmt.Fprintln(w, outcome) // applied, then duplicate: ack both
	}

	var balance int64
	if err := pool.QueryRow(ctx, `SELECT balance_cents FROM accounts WHERE id = 1`).Scan(&balance); err != nil {
		return err
	}
	fmt.Fprintf(w, "balance: %d cents\n", balance)
	return nil
}
