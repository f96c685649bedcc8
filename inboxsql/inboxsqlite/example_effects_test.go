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

// A remote call from a handler on SQLite: the effects ledger lives in a
// file of its own (Config.EffectsDB), because the handler's transaction
// holds the inbox file's write lock. The handler fails after the capture;
// the redelivery gets the stored result and does not capture again.
func Example_sqliteEffects() {
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
	effects, err := inboxsqlite.Open(filepath.Join(dir, "billing-effects.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer effects.Close()

	ld, err := inboxsql.New(effects, inboxsqlite.Engine, nil)
	if err != nil {
		log.Fatal(err)
	}
	d, err := inboxsql.New(db, inboxsqlite.Engine, &inboxsql.Config{EffectsDB: effects})
	if err != nil {
		log.Fatal(err)
	}
	for _, store := range []*inboxsql.Driver{ld, d} {
		m, err := inboxmigrate.New(store)
		if err != nil {
			log.Fatal(err)
		}
		if _, err := m.Up(ctx); err != nil {
			log.Fatal(err)
		}
	}
	client, err := inbox.NewClient(d, nil)
	if err != nil {
		log.Fatal(err)
	}

	captures := 0
	capture := func(ctx context.Context, key string) ([]byte, error) {
		captures++ // a payment provider's capture, with key as its Idempotency-Key
		return []byte("cap_1"), nil
	}
	failOnce := true
	h := inbox.HandlerFunc[*sql.Tx](func(ctx context.Context, tx *sql.Tx, msg inbox.Message) error {
		res, err := client.Effect(ctx, msg, "capture", capture, &inbox.EffectOpts{NonIdempotent: true})
		if err != nil {
			return err
		}
		fmt.Println("captured:", string(res))
		if failOnce {
			failOnce = false
			return fmt.Errorf("the database write after the capture failed")
		}
		return nil
	})
	msg := inbox.Message{ID: "0190a2b4-6f6e-7c3a-9d1e-5b2f3c4d5e6f", Payload: []byte(`{"amount_cents":100}`)}
	for range 2 {
		outcome, err := client.Process(ctx, "billing", msg, h)
		if err != nil {
			fmt.Println("error:", err)
			continue
		}
		fmt.Println(outcome)
	}
	fmt.Println("captures:", captures)
	// Output:
	// captured: cap_1
	// error: inbox: handler billing/0190a2b4-6f6e-7c3a-9d1e-5b2f3c4d5e6f: the database write after the capture failed
	// captured: cap_1
	// applied
	// captures: 1
}
