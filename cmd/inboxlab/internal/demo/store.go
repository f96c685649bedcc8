package demo

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxmigrate"
	"github.com/txinbox/inbox/inboxsql"
	"github.com/txinbox/inbox/inboxsql/inboxpostgres"
	"github.com/txinbox/inbox/inboxsql/inboxsqlite"
	"github.com/txinbox/inbox/internal/command"
	"github.com/txinbox/inbox/internal/testdb"
)

// store is the demo's database: the inbox tables and, per strategy, the
// balances, the stock and a log of every application.
type store struct {
	kind    string // "sqlite" or "postgres"
	db      *sql.DB
	dialect inboxsql.Dialect
	// where tells a consumer process how to open the store.
	url, schema, dir string
}

func openStore(ctx context.Context, url string) (*store, error) {
	if url == "" {
		dir, err := os.MkdirTemp("", "inbox-demo-")
		if err != nil {
			return nil, err
		}
		st := &store{kind: "sqlite", dialect: inboxsql.SQLite, url: "sqlite:" + filepath.Join(dir, "demo.db"), dir: dir}
		if st.db, err = inboxsqlite.Open(filepath.Join(dir, "demo.db")); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		// SQLite has one writer. The demo's own consumers take turns on one
		// connection, so that they wait in line for it rather than race for
		// the file lock against each other and the inbox processes.
		st.db.SetMaxOpenConns(1)
		return st, nil
	}
	if !strings.HasPrefix(url, "postgres://") && !strings.HasPrefix(url, "postgresql://") {
		return nil, fmt.Errorf("--database-url %q: want postgres://… (or nothing, for embedded SQLite)", url)
	}
	st := &store{kind: "postgres", dialect: inboxsql.Postgres, url: url, schema: "inbox_demo_" + testdb.RandomSuffix()}
	db, err := openPostgres(url, st.schema)
	if err != nil {
		return nil, err
	}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("cannot reach the database at %s: %w", where(url), err)
	}
	st.db = db
	return st, nil
}

// where names the database of url for messages, without its password.
func where(url string) string {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return "(unparsable URL)"
	}
	return fmt.Sprintf("%s:%d/%s", cfg.Host, cfg.Port, cfg.Database)
}

// openPostgres opens url with schema first on the search_path.
func openPostgres(url, schema string) (*sql.DB, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("--database-url: %w", err)
	}
	cfg.RuntimeParams["search_path"] = schema
	return stdlib.OpenDB(*cfg), nil
}

// engine returns the database/sql engine of the demo's dialect.
func engine(d inboxsql.Dialect) inboxsql.Engine {
	if d == inboxsql.Postgres {
		return inboxpostgres.Engine
	}
	return inboxsqlite.Engine
}

// openAgain opens the store from a consumer process.
func openAgain(url, schema string) (*sql.DB, inboxsql.Dialect, error) {
	if path, ok := strings.CutPrefix(url, "sqlite:"); ok {
		db, err := inboxsqlite.Open(path)
		if err == nil {
			db.SetMaxOpenConns(1)
		}
		return db, inboxsql.SQLite, err
	}
	db, err := openPostgres(url, schema)
	return db, inboxsql.Postgres, err
}

// close drops the run's schema or removes its SQLite file, and says which.
func (s *store) close() string {
	var said string
	if s.schema != "" {
		_, err := s.db.Exec(`DROP SCHEMA IF EXISTS ` + pgx.Identifier{s.schema}.Sanitize() + ` CASCADE`)
		said = "dropped schema " + s.schema
		if err != nil {
			said = fmt.Sprintf("could not drop schema %s (%s)", s.schema, command.Message(err))
		}
	}
	s.db.Close()
	if s.dir != "" {
		said = "removed " + s.dir
		if err := os.RemoveAll(s.dir); err != nil {
			said = fmt.Sprintf("could not remove %s (%v)", s.dir, err)
		}
	}
	return said
}

// q rewrites ? placeholders for Postgres.
func (s *store) q(query string) string { return rebind(s.dialect, query) }

func rebind(d inboxsql.Dialect, query string) string {
	if d != inboxsql.Postgres {
		return query
	}
	var b strings.Builder
	n := 0
	for _, c := range query {
		if c == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

func (s *store) setup(ctx context.Context) error {
	if s.schema != "" {
		if _, err := s.db.ExecContext(ctx, `CREATE SCHEMA `+pgx.Identifier{s.schema}.Sanitize()); err != nil {
			return fmt.Errorf("create schema: %w", err)
		}
	}
	d, err := inboxsql.New(s.db, engine(s.dialect), &inboxsql.Config{Tables: inboxdriver.Tables{Schema: s.schema}})
	if err != nil {
		return err
	}
	if _, err := inboxmigrate.Up(ctx, d); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	for _, stmt := range []string{
		`CREATE TABLE balances (strategy TEXT NOT NULL, account TEXT NOT NULL, cents BIGINT NOT NULL, PRIMARY KEY (strategy, account))`,
		`CREATE TABLE stock (strategy TEXT NOT NULL, sku TEXT NOT NULL, reserved BIGINT NOT NULL, PRIMARY KEY (strategy, sku))`,
		// One row per application of an event by a consumer: the count the
		// demo checks.
		`CREATE TABLE applied (strategy TEXT NOT NULL, consumer TEXT NOT NULL, event_id TEXT NOT NULL)`,
		// The skip sets of the strategies that claim in the transaction with
		// a key of their own.
		`CREATE TABLE dedup (strategy TEXT NOT NULL, consumer TEXT NOT NULL, dedup_key TEXT NOT NULL, PRIMARY KEY (strategy, consumer, dedup_key))`,
		// The events each strategy decided to skip as duplicates.
		`CREATE TABLE skipped (strategy TEXT NOT NULL, consumer TEXT NOT NULL, event_id TEXT NOT NULL)`,
		// The orders of the producer side (producer.go).
		`CREATE TABLE orders (strategy TEXT NOT NULL, id TEXT NOT NULL, account TEXT NOT NULL, cents BIGINT NOT NULL, PRIMARY KEY (strategy, id))`,
	} {
		if _, err := s.db.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("create tables: %w", err)
		}
	}
	return nil
}

// execer is a transaction or a database.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// apply is the consumers' side effect: billing credits the account,
// inventory reserves stock, and either logs the application.
func apply(ctx context.Context, d inboxsql.Dialect, tx execer, strategy, consumer string, e event) error {
	var err error
	switch consumer {
	case "billing":
		_, err = tx.ExecContext(ctx, rebind(d, `INSERT INTO balances (strategy, account, cents) VALUES (?, ?, ?)
ON CONFLICT (strategy, account) DO UPDATE SET cents = balances.cents + excluded.cents`), strategy, e.Account, e.Cents)
	default:
		_, err = tx.ExecContext(ctx, rebind(d, `INSERT INTO stock (strategy, sku, reserved) VALUES (?, ?, ?)
ON CONFLICT (strategy, sku) DO UPDATE SET reserved = stock.reserved + excluded.reserved`), strategy, e.SKU, e.Qty)
	}
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, rebind(d, `INSERT INTO applied (strategy, consumer, event_id) VALUES (?, ?, ?)`), strategy, consumer, e.ID)
	return err
}

// tally counts what one strategy did, over both consumers.
func (s *store) tally(ctx context.Context, sc *scenario, strategy string) (*StrategyResult, error) {
	res := &StrategyResult{Name: strategy, BalanceOK: true}
	count := func(query string, args ...any) (map[string]int, error) {
		rows, err := s.db.QueryContext(ctx, s.q(query), args...)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		out := map[string]int{}
		for rows.Next() {
			var id string
			var n int
			if err := rows.Scan(&id, &n); err != nil {
				return nil, err
			}
			out[id] = n
		}
		return out, rows.Err()
	}
	for _, consumer := range consumers {
		applied, err := count(`SELECT event_id, count(*) FROM applied WHERE strategy = ? AND consumer = ? GROUP BY event_id`, strategy, consumer)
		if err != nil {
			return nil, err
		}
		skipped, err := count(`SELECT event_id, count(*) FROM skipped WHERE strategy = ? AND consumer = ? GROUP BY event_id`, strategy, consumer)
		if err != nil {
			return nil, err
		}
		for _, e := range sc.events {
			switch n := applied[e.ID]; {
			case n > 1:
				res.DoubleApplied += n - 1
			case n == 0 && skipped[e.ID] > 0:
				res.WronglySkipped++
			case n == 0:
				res.Lost++
			}
		}
	}
	wantCents, wantQty := sc.want()
	got := func(query string) (map[string]int64, error) {
		rows, err := s.db.QueryContext(ctx, s.q(query), strategy)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		out := map[string]int64{}
		for rows.Next() {
			var k string
			var v int64
			if err := rows.Scan(&k, &v); err != nil {
				return nil, err
			}
			out[k] = v
		}
		return out, rows.Err()
	}
	cents, err := got(`SELECT account, cents FROM balances WHERE strategy = ?`)
	if err != nil {
		return nil, err
	}
	qty, err := got(`SELECT sku, reserved FROM stock WHERE strategy = ?`)
	if err != nil {
		return nil, err
	}
	res.BalanceOK = sameTotals(cents, wantCents) && sameTotals(qty, wantQty)
	for _, v := range cents {
		res.Cents += v
	}
	for _, v := range wantCents {
		res.WantCents += v
	}
	return res, nil
}

func sameTotals(got, want map[string]int64) bool {
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	for k, v := range got {
		if want[k] != v {
			return false
		}
	}
	return true
}
