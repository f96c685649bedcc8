package inboxpgx_test

import (
	"context"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxmigrate"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/internal/testdb"
)

// exampleClient returns a client over a fresh schema of the test database,
// with an accounts table, and a function that drops the schema.
func exampleClient() (*inbox.Client[pgx.Tx], *pgxpool.Pool, func()) {
	ctx := context.Background()
	url, _, dropSchema, err := testdb.SchemaURL()
	if err != nil {
		log.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		log.Fatal(err)
	}
	drop := func() { pool.Close(); dropSchema() }
	driver, err := inboxpgx.New(pool, nil)
	if err != nil {
		log.Fatal(err)
	}
	m, err := inboxmigrate.New(driver)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := m.Up(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE accounts (id int PRIMARY KEY, balance_cents bigint NOT NULL);
INSERT INTO accounts VALUES (1, 0)`); err != nil {
		log.Fatal(err)
	}
	client, err := inbox.NewClient(driver, nil)
	if err != nil {
		log.Fatal(err)
	}
	return client, pool, drop
}

func balance(pool *pgxpool.Pool) int64 {
	var b int64
	if err := pool.QueryRow(context.Background(), `SELECT balance_cents FROM accounts WHERE id = 1`).Scan(&b); err != nil {
		log.Fatal(err)
	}
	return b
}

// The handler that ran twice, fixed: the second delivery of the same event
// is a Duplicate, and the account is credited once.
func Example() {
	client, pool, drop := exampleClient()
	defer drop()
	ctx := context.Background()

	credit := inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
		_, err := tx.Exec(ctx, `UPDATE accounts SET balance_cents = balance_cents + 100 WHERE id = 1`)
		return err
	})
	// The producer's event id, the same on every delivery.
	msg := inbox.Message{ID: "0190c8e4-7b3a-7cc1-9f00-2b7c4e1d9a55"}
	for range 2 {
		outcome, err := client.Process(ctx, "billing", msg, credit)
		fmt.Println(outcome, err)
	}
	fmt.Println("balance:", balance(pool))
	// Output:
	// applied <nil>
	// duplicate <nil>
	// balance: 100
}

// ProcessBatch claims every id with one statement and commits once. Two
// legitimate events with identical bodies are two events: their ids differ.
func ExampleClient_ProcessBatch() {
	client, pool, drop := exampleClient()
	defer drop()
	ctx := context.Background()
	credit := inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
		_, err := tx.Exec(ctx, `UPDATE accounts SET balance_cents = balance_cents + 100 WHERE id = 1`)
		return err
	})
	body := []byte(`{"account":1,"amount_cents":100}`)
	batch := []inbox.Message{
		{ID: "0190c8e4-7b3a-7cc1-9f00-000000000001", Payload: body},
		{ID: "0190c8e4-7b3a-7cc1-9f00-000000000002", Payload: body},
		{ID: "0190c8e4-7b3a-7cc1-9f00-000000000001", Payload: body}, // redelivered
	}
	results, err := client.ProcessBatch(ctx, "billing", batch, credit)
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range results {
		fmt.Println(r.Outcome, r.Err)
	}
	fmt.Println("balance:", balance(pool))
	// Output:
	// applied <nil>
	// applied <nil>
	// duplicate <nil>
	// balance: 200
}

// A handler that only writes can queue its statements: Process then sends
// BEGIN, the claim, the UPDATE and COMMIT in one round trip. The duplicate
// fails the claim, and its UPDATE does not run.
func ExamplePipelineFunc() {
	client, pool, drop := exampleClient()
	defer drop()
	ctx := context.Background()

	credit := inboxpgx.PipelineFunc(func(ctx context.Context, msg inbox.Message, b *pgx.Batch) error {
		b.Queue(`UPDATE accounts SET balance_cents = balance_cents + 100 WHERE id = 1`)
		return nil
	})
	msg := inbox.Message{ID: "0190c8e4-7b3a-7cc1-9f00-2b7c4e1d9a55"}
	for range 2 {
		outcome, err := client.Process(ctx, "billing", msg, credit)
		fmt.Println(outcome, err)
	}
	fmt.Println("balance:", balance(pool))
	// Output:
	// applied <nil>
	// duplicate <nil>
	// balance: 100
}

// ClaimTx claims inside a transaction the application already runs.
func ExampleClient_ClaimTx() {
	client, pool, drop := exampleClient()
	defer drop()
	ctx := context.Background()
	msg := inbox.Message{ID: "urn:uuid:0190C8E4-7B3A-7CC1-9F00-2B7C4E1D9A55"}
	for range 2 {
		tx, err := pool.Begin(ctx)
		if err != nil {
			log.Fatal(err)
		}
		outcome, err := client.ClaimTx(ctx, tx, "billing", msg)
		if err != nil {
			log.Fatal(err)
		}
		if outcome == inbox.Duplicate {
			fmt.Println("already applied; rolling back")
			_ = tx.Rollback(ctx)
			continue
		}
		if _, err := tx.Exec(ctx, `UPDATE accounts SET balance_cents = balance_cents + 100 WHERE id = 1`); err != nil {
			log.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			log.Fatal(err)
		}
		fmt.Println("applied and committed")
	}
	fmt.Println("balance:", balance(pool))
	// Output:
	// applied and committed
	// already applied; rolling back
	// balance: 100
}

// JSONKey reads the producer's event id from the payload.
func ExampleJSONKey() {
	key := inbox.JSONKey("meta.event_id")
	id, err := key(inbox.Message{Payload: []byte(`{"meta":{"event_id":"0190c8e4-7b3a-7cc1-9f00-2b7c4e1d9a55"},"amount_cents":100}`)})
	fmt.Println(id, err)
	_, err = key(inbox.Message{Payload: []byte(`{"amount_cents":100}`)})
	fmt.Println(err)
	// Output:
	// 0190c8e4-7b3a-7cc1-9f00-2b7c4e1d9a55 <nil>
	// json field "meta.event_id": message has no id: no field "meta"
}
