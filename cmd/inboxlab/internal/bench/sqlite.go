package bench

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxmigrate"
	"github.com/txinbox/inbox/inboxsql"
	"github.com/txinbox/inbox/inboxsql/inboxsqlite"
)

// sqliteStore is the SQLite side of the inbox-sqlite rows: a database file
// of its own, with its own accounts and inbox.
type sqliteStore struct {
	db      *sql.DB
	client  *inbox.Client[*sql.Tx]
	handler inbox.Handler[*sql.Tx]
}

// sqliteResource opens the SQLite file in a temporary directory, removed at
// the end. SQLite has one writer, so the pool has one connection: the
// workers wait in line for it instead of racing for the file's lock.
var sqliteResource = &resource{
	name: "sqlite",
	open: func(ctx context.Context, b *bench) (func(), error) {
		dir, err := os.MkdirTemp("", "inbox-bench-")
		if err != nil {
			return nil, err
		}
		db, err := inboxsqlite.Open(filepath.Join(dir, "bench.db"))
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		db.SetMaxOpenConns(1)
		closeFn := func() { db.Close(); os.RemoveAll(dir) }
		d, err := inboxsql.New(db, inboxsqlite.Engine, nil)
		if err != nil {
			closeFn()
			return nil, err
		}
		if _, err := inboxmigrate.Up(ctx, d); err != nil {
			closeFn()
			return nil, fmt.Errorf("migrate: %w", err)
		}
		for _, stmt := range []string{
			`CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL DEFAULT 0)`,
			fmt.Sprintf(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < %d) INSERT INTO accounts (id) SELECT i FROM n`, b.cfg.Accounts),
		} {
			if _, err := db.ExecContext(ctx, stmt); err != nil {
				closeFn()
				return nil, fmt.Errorf("setup: %w", err)
			}
		}
		client, err := inbox.NewClient(d, nil)
		if err != nil {
			closeFn()
			return nil, err
		}
		b.sqlite = &sqliteStore{db: db, client: client,
			handler: inbox.HandlerFunc[*sql.Tx](func(ctx context.Context, tx *sql.Tx, msg inbox.Message) error {
				account, amount, err := decodeEffect(msg.Payload)
				if err != nil {
					return inbox.Permanent(err)
				}
				_, err = tx.ExecContext(ctx, `UPDATE accounts SET balance = balance + ? WHERE id = ?`, amount, account)
				return err
			})}
		return closeFn, nil
	},
}

// inboxSQLite processes one message per transaction on SQLite.
func inboxSQLite(ctx context.Context, b *bench, w *worker) error {
	return process(ctx, b.sqlite.client, b.sqlite.handler, w.next(b, 1)[0], inbox.Applied)
}

// inboxSQLiteBatch processes the row's batch in one transaction on SQLite.
// The handler runs in process, so one call per message costs no round trip.
func inboxSQLiteBatch(ctx context.Context, b *bench, w *worker) error {
	es := w.next(b, w.batch)
	results, err := b.sqlite.client.ProcessBatch(ctx, consumer, w.messages(es), b.sqlite.handler)
	if err != nil {
		return err
	}
	for i, r := range results {
		if r.Err != nil {
			return r.Err
		}
		if r.Outcome != inbox.Applied {
			return fmt.Errorf("message %s: got %v, want Applied", es[i].msg.ID, r.Outcome)
		}
	}
	return nil
}
