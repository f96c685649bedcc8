package inboxsql_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxmigrate"
	"github.com/txinbox/inbox/inboxsql"
	"github.com/txinbox/inbox/inboxsql/inboxmysql"
	"github.com/txinbox/inbox/inboxsql/inboxpostgres"
	"github.com/txinbox/inbox/inboxsql/inboxsqlite"
	"github.com/txinbox/inbox/inboxtest"
	"github.com/txinbox/inbox/internal/testdb"
)

// Package enginetest runs the tests of package inboxsql against every
// engine: it is a module of its own, so that inboxsql's module needs none
// of the engines' drivers.

func TestMain(m *testing.M) { testdb.Main(m) }

// engineOf returns the engine package's Engine for a dialect; for an
// unknown one, an engine that reports it, so that New's check can be
// tested.
func engineOf(d inboxsql.Dialect) inboxsql.Engine {
	switch d {
	case inboxsql.SQLite:
		return inboxsqlite.Engine
	case inboxsql.Postgres:
		return inboxpostgres.Engine
	case inboxsql.MySQL:
		return inboxmysql.MySQL
	case inboxsql.MariaDB:
		return inboxmysql.MariaDB
	}
	return unknownEngine(d)
}

type unknownEngine inboxsql.Dialect

func (e unknownEngine) Dialect() inboxsql.Dialect           { return inboxsql.Dialect(e) }
func (unknownEngine) Classify(error) inboxdriver.ErrorClass { return inboxdriver.ClassOther }
func (unknownEngine) DuplicateKey(error) bool               { return false }

// engine opens an isolated database of one engine for a test.
type engine struct {
	name    string
	dialect inboxsql.Dialect
	// open returns a database no other test uses, and the tables to use
	// in it.
	open func(t *testing.T) (*sql.DB, inboxdriver.Tables)
	// effectsDB, if set, opens the database of Config.EffectsDB.
	effectsDB func(t *testing.T) *sql.DB
	// effectsSuite runs inboxtest.ExerciseEffects on the engine.
	effectsSuite bool
	// effects is the quoted name of the conformance suite's effects table.
	effects func(tables inboxdriver.Tables) string
	// waiting counts the claims waiting for a lock, or is nil.
	waiting func(t *testing.T, db *sql.DB, tables inboxdriver.Tables) func(ctx context.Context) (int, error)
	// partitions configure a partitioned inbox.
	partitions inboxdriver.PartitionConfig
}

func sqliteDB(t *testing.T) *sql.DB {
	t.Helper()
	db, err := inboxsqlite.Open(filepath.Join(t.TempDir(), "inbox.db"))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

func postgresDB(t *testing.T) (*sql.DB, inboxdriver.Tables) {
	t.Helper()
	db := postgresPool(t)
	return db, inboxdriver.Tables{Schema: testdb.Schema(t)}
}

var engines = []engine{
	{
		// SQLite with the ledger in the inbox's own file, the default:
		// Client.Effect cannot run in a handler there (see effects_test.go).
		name:    "sqlite",
		dialect: inboxsql.SQLite,
		open: func(t *testing.T) (*sql.DB, inboxdriver.Tables) {
			return sqliteDB(t), inboxdriver.Tables{}
		},
		effects: func(inboxdriver.Tables) string { return `"effects"` },
	},
	{
		// SQLite with the ledger in a file of its own (Config.EffectsDB).
		name:    "sqlite-effectsdb",
		dialect: inboxsql.SQLite,
		open: func(t *testing.T) (*sql.DB, inboxdriver.Tables) {
			return sqliteDB(t), inboxdriver.Tables{}
		},
		effectsDB:    sqliteDB,
		effects:      func(inboxdriver.Tables) string { return `"effects"` },
		effectsSuite: true,
	},
	{
		name:         "sql-postgres",
		dialect:      inboxsql.Postgres,
		open:         postgresDB,
		effectsSuite: true,
		effects:      func(t inboxdriver.Tables) string { return pgx.Identifier{t.Schema, "effects"}.Sanitize() },
		waiting: func(t *testing.T, db *sql.DB, tables inboxdriver.Tables) func(ctx context.Context) (int, error) {
			return func(ctx context.Context) (int, error) {
				var n int
				err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
 WHERE wait_event_type = 'Lock' AND query LIKE 'INSERT INTO ' || $1 || '%'`, pgx.Identifier{tables.Schema}.Sanitize()).Scan(&n)
				return n, err
			}
		},
	},
	{
		name:    "mariadb",
		dialect: inboxsql.MariaDB,
		open: func(t *testing.T) (*sql.DB, inboxdriver.Tables) {
			db, _ := testdb.MySQL(t)
			return db, inboxdriver.Tables{}
		},
		effects:      func(inboxdriver.Tables) string { return "`effects`" },
		waiting:      mysqlWaiting,
		effectsSuite: true,
	},
	{
		// The MySQL dialect (no RETURNING, no SET STATEMENT), run on
		// MariaDB, with the database named in the table names.
		name:    "mysql-on-mariadb",
		dialect: inboxsql.MySQL,
		open: func(t *testing.T) (*sql.DB, inboxdriver.Tables) {
			db, name := testdb.MySQL(t)
			return db, inboxdriver.Tables{Schema: name}
		},
		effects:      func(t inboxdriver.Tables) string { return "`" + t.Schema + "`.`effects`" },
		waiting:      mysqlWaiting,
		effectsSuite: true,
	},
}

// engineNamed returns the engine called name.
func engineNamed(t *testing.T, name string) engine {
	t.Helper()
	for _, e := range engines {
		if e.name == name {
			return e
		}
	}
	t.Fatalf("no engine %q", name)
	return engine{}
}

// innodbTrx spaces out the reads of information_schema.INNODB_TRX. InnoDB
// fills that table from a cache that it refreshes only when no one has read
// it for 0.1s: read in a tight loop, it never changes.
var innodbTrx struct {
	mu   sync.Mutex
	last time.Time
}

// mysqlWaiting counts the transactions of the test's database that wait
// for a row lock. It reports 0 without reading while the last read, by any
// test, is too recent for InnoDB to have refreshed the table.
func mysqlWaiting(t *testing.T, db *sql.DB, _ inboxdriver.Tables) func(ctx context.Context) (int, error) {
	return func(ctx context.Context) (int, error) {
		innodbTrx.mu.Lock()
		defer innodbTrx.mu.Unlock()
		if time.Since(innodbTrx.last) < 150*time.Millisecond {
			return 0, nil
		}
		defer func() { innodbTrx.last = time.Now() }()
		var n int
		err := db.QueryRowContext(ctx, `SELECT count(*) FROM information_schema.INNODB_TRX t
  JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id
 WHERE t.trx_state = 'LOCK WAIT' AND p.DB = DATABASE()`).Scan(&n)
		return n, err
	}
}

// newDriver returns a migrated driver over a fresh database of e.
func (e engine) newDriver(t *testing.T) (*inboxsql.Driver, inboxdriver.Tables) {
	t.Helper()
	db, tables := e.open(t)
	cfg := &inboxsql.Config{Tables: tables, Partitions: e.partitions}
	if e.effectsDB != nil {
		cfg.EffectsDB = e.effectsDB(t)
		migrate(t, cfg.EffectsDB, e.dialect, tables)
	}
	d, err := inboxsql.New(db, engineOf(e.dialect), cfg)
	require.NoError(t, err)
	m, err := inboxmigrate.New(d)
	require.NoError(t, err)
	_, err = m.Up(context.Background())
	require.NoError(t, err)
	return d, d.Tables()
}

// migrate migrates db as a store of its own, as the database of
// Config.EffectsDB is.
func migrate(t *testing.T, db *sql.DB, dialect inboxsql.Dialect, tables inboxdriver.Tables) {
	t.Helper()
	d, err := inboxsql.New(db, engineOf(dialect), &inboxsql.Config{Tables: tables})
	require.NoError(t, err)
	m, err := inboxmigrate.New(d)
	require.NoError(t, err)
	_, err = m.Up(context.Background())
	require.NoError(t, err)
}

// ph is the dialect's n-th placeholder.
func (e engine) ph(n int) string {
	if e.dialect == inboxsql.Postgres {
		return "$" + string(rune('0'+n))
	}
	return "?"
}

// claimCounter counts the BeginClaim calls in flight. While one delivery
// holds SQLite's write lock inside its handler, any other BeginClaim in
// flight cannot finish before that delivery ends: it waits for the lock.
type claimCounter struct {
	*inboxsql.Driver
	inFlight atomic.Int32
}

func (c *claimCounter) BeginClaim(ctx context.Context, p *inboxdriver.ClaimParams) (*sql.Tx, []bool, error) {
	c.inFlight.Add(1)
	defer c.inFlight.Add(-1)
	return c.Driver.BeginClaim(ctx, p)
}

func (e engine) newStore(t *testing.T) *inboxtest.Store[*sql.Tx] {
	d, tables := e.newDriver(t)
	db := d.DB()
	effects := e.effects(tables)
	ctx := context.Background()
	_, err := db.ExecContext(ctx, `CREATE TABLE `+effects+` (consumer VARCHAR(128) NOT NULL, message_id VARCHAR(255) NOT NULL)`)
	require.NoError(t, err)
	s := &inboxtest.Store[*sql.Tx]{
		Driver: d,
		Begin:  func(ctx context.Context) (*sql.Tx, error) { return db.BeginTx(ctx, nil) },
		Effect: func(ctx context.Context, tx *sql.Tx, consumer, id string) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO `+effects+` (consumer, message_id) VALUES (`+e.ph(1)+`, `+e.ph(2)+`)`, consumer, id)
			return err
		},
		Effects: func(ctx context.Context, consumer, id string) (int, error) {
			var n int
			err := db.QueryRowContext(ctx, `SELECT count(*) FROM `+effects+` WHERE consumer = `+e.ph(1)+` AND message_id = `+e.ph(2), consumer, id).Scan(&n)
			return n, err
		},
	}
	if e.waiting != nil {
		s.WaitingClaims = e.waiting(t, db, tables)
	} else {
		c := &claimCounter{Driver: d}
		s.Driver = c
		s.WaitingClaims = func(context.Context) (int, error) { return int(c.inFlight.Load()), nil }
	}
	return s
}

func TestConformance(t *testing.T) {
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			inboxtest.Exercise(t, e.newStore)
			if e.effectsSuite {
				inboxtest.ExerciseEffects(t, e.newStore)
			}
		})
	}
}

var postgresPools testdb.Shared[*sql.DB]

// postgresPool returns the database/sql pool on the test Postgres that the
// tests share.
func postgresPool(t *testing.T) *sql.DB {
	return postgresPools.Get(t, func(_ context.Context, url string) (*sql.DB, error) {
		db, err := inboxpostgres.Open(url)
		if err == nil {
			db.SetMaxOpenConns(16)
		}
		return db, err
	}, func(db *sql.DB) { db.Close() })
}
