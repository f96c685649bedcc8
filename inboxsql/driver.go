package inboxsql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/internal/pgpartition"
)

// Dialect is the SQL engine behind a *sql.DB.
type Dialect string

// The dialects. MySQL and MariaDB share their schema, but MariaDB's
// RETURNING and SET STATEMENT make its claims cheaper.
const (
	// SQLite is SQLite 3.35 or later (package inboxsqlite).
	SQLite Dialect = "sqlite"
	// Postgres is PostgreSQL 12 or later (package inboxpostgres).
	Postgres Dialect = "postgres"
	// MySQL is MySQL 8.0 or later (package inboxmysql).
	MySQL Dialect = "mysql"
	// MariaDB is MariaDB 10.5 or later (package inboxmysql).
	MariaDB Dialect = "mariadb"
)

// Opening the database.
//
//   - SQLite: inboxsqlite.Open (see below) and inboxsqlite.Engine.
//     Package inboxsqlite registers modernc.org/sqlite as "sqlite".
//   - Postgres: inboxpostgres.Open(url), or stdlib.OpenDBFromPool over a
//     pgx pool, and inboxpostgres.Engine. Package inboxpgx is the primary
//     Postgres store: it sends the claim with the BEGIN in one round trip.
//     Use this one where the application already speaks database/sql.
//   - MySQL or MariaDB: sql.Open("mysql", dsn), with package inboxmysql
//     imported, which registers go-sql-driver/mysql. Pass
//     inboxmysql.MariaDB for a MariaDB server (10.5 or later),
//     inboxmysql.MySQL otherwise. Times are stored in DATETIME(6) columns in
//     UTC, and sent and read as text, so the DSN's parseTime and loc and
//     the session's time_zone do not move them. The server must run in a
//     strict sql_mode (the default since MySQL 5.7 and MariaDB 10.2.4).

// Engine is what the store needs to know of a database/sql driver that
// database/sql cannot tell it: the SQL dialect the database speaks, and
// what the driver's own errors mean. Each engine package provides one and
// registers its database/sql driver; a program links, and registers, only
// the engines it imports:
//
//   - inboxsqlite.Engine: SQLite through modernc.org/sqlite;
//   - inboxpostgres.Engine: Postgres through pgx's stdlib;
//   - inboxmysql.MySQL and inboxmysql.MariaDB: go-sql-driver/mysql.
type Engine interface {
	// Dialect is the SQL dialect of the database.
	Dialect() Dialect
	// Classify returns the class of an error of the driver that the
	// engine knows (a lost connection, a lock timeout, a conflict), or
	// inboxdriver.ClassOther. It is asked before the store's own rules,
	// which read SQLSTATEs and SQLite result codes through interfaces.
	Classify(err error) inboxdriver.ErrorClass
	// DuplicateKey reports whether err is a unique-key violation. The
	// MySQL dialects claim with a plain INSERT, whose duplicate-key error
	// means the row exists.
	DuplicateKey(err error) bool
}

// schema returns the dialect of the SQL schema, for inboxmigrate.
func (d Dialect) schema() inboxdriver.Dialect {
	switch d {
	case SQLite:
		return inboxdriver.DialectSQLite
	case Postgres:
		return inboxdriver.DialectPostgres
	default:
		return inboxdriver.DialectMySQL
	}
}

func (d Dialect) mysql() bool { return d == MySQL || d == MariaDB }

// Config configures a Driver. The zero value is valid.
type Config struct {
	// Tables names the tables, their schema (the database, on MySQL), and
	// the type of the id column. SQLite has no schemas. Defaults to the
	// default names in the connection's default schema, with uuid ids.
	Tables inboxdriver.Tables

	// TxOptions are the options of the transactions the driver begins for
	// Process and ProcessBatch. Defaults to nil: the database's default
	// isolation level.
	TxOptions *sql.TxOptions

	// EffectsDB is, on SQLite only, a second database, in a file of its
	// own, that holds the effects ledger of inbox.Client.Effect, migrated
	// like the first (see ErrLedgerLocked).
	// SQLite has one writer per database file, and a handler's transaction
	// holds that file's write lock until it ends: only a ledger in another
	// file can record a step while a handler runs. Open it with inboxsqlite.Open
	// too. Defaults to nil: the ledger is in the inbox's own database,
	// where Effect cannot be called from a handler (ErrLedgerLocked).
	EffectsDB *sql.DB

	// Partitions are, on Postgres, the settings of an inbox in the
	// partitioned layout (Tables.Layout inboxdriver.LayoutPartitioned);
	// other layouts ignore them. Defaults to those of
	// inboxdriver.PartitionConfig.
	Partitions inboxdriver.PartitionConfig
}

// Driver is the inbox store over a *sql.DB. It is safe for concurrent use.
type Driver struct {
	db        *sql.DB
	dialect   Dialect
	engine    Engine
	tables    inboxdriver.Tables
	txOptions *sql.TxOptions
	q         *queries
	// effectsDB is the SQLite ledger's own database, or nil.
	effectsDB *sql.DB

	// open holds, on SQLite with the ledger in the inbox's own file, the
	// transactions that BeginClaim began and that have
	// not ended; openN counts them. While one is open it holds the write
	// lock, and a ledger write fails fast (ErrLedgerLocked).
	open  sync.Map // *sql.Tx -> struct{}
	openN atomic.Int64

	// pinned holds, on SQLite, the connection of each transaction that
	// BeginClaim began, to return it to the pool when the transaction ends.
	pinned sync.Map // *sql.Tx -> *sql.Conn

	// locks are the WithLock locks held in this process, on SQLite.
	locksMu sync.Mutex
	locks   map[string]bool

	// keys is where the next ordered claim's walk of the keys resumes.
	keys inboxdriver.OutboxKeyCursor

	// partitions keeps the inbox's partitions, when it is partitioned.
	partitions *pgpartition.Maintainer
}

var _ inboxdriver.Driver[*sql.Tx] = (*Driver)(nil)

// New returns a driver over db, whose driver and dialect engine describes.
// config may be nil.
func New(db *sql.DB, engine Engine, config *Config) (*Driver, error) {
	if db == nil {
		return nil, errors.New("inboxsql: db is nil")
	}
	if engine == nil {
		return nil, errors.New("inboxsql: engine is nil: pass inboxsqlite.Engine, inboxpostgres.Engine, inboxmysql.MySQL or inboxmysql.MariaDB")
	}
	dialect := engine.Dialect()
	switch dialect {
	case SQLite, Postgres, MySQL, MariaDB:
	default:
		return nil, fmt.Errorf("inboxsql: unknown dialect %q: want %q, %q, %q or %q", dialect, SQLite, Postgres, MySQL, MariaDB)
	}
	var cfg Config
	if config != nil {
		cfg = *config
	}
	t := cfg.Tables.WithDefaults()
	if err := t.Validate(dialect.schema()); err != nil {
		return nil, err
	}
	if cfg.EffectsDB != nil {
		switch {
		case dialect != SQLite:
			return nil, fmt.Errorf("inboxsql: Config.EffectsDB is for SQLite only: %s keeps the ledger beside the inbox", dialect)
		case cfg.EffectsDB == db:
			return nil, errors.New("inboxsql: Config.EffectsDB is the inbox's own database: give the ledger a database file of its own, or leave it nil")
		}
	}
	if err := cfg.Partitions.Validate(); err != nil {
		return nil, err
	}
	d := &Driver{
		db:        db,
		dialect:   dialect,
		engine:    engine,
		tables:    t,
		txOptions: cfg.TxOptions,
		q:         newQueries(dialect, t),
		effectsDB: cfg.EffectsDB,
		locks:     map[string]bool{},
	}
	if dialect == Postgres {
		d.partitions = pgpartition.New(partitionDB{d}, t, cfg.Partitions)
	}
	return d, nil
}

// DB returns the driver's database.
func (d *Driver) DB() *sql.DB { return d.db }

// EffectsDB returns the database of the effects ledger: Config.EffectsDB,
// or else the driver's database.
func (d *Driver) EffectsDB() *sql.DB {
	if d.effectsDB != nil {
		return d.effectsDB
	}
	return d.db
}

// SQLDialect returns the driver's dialect.
func (d *Driver) SQLDialect() Dialect { return d.dialect }

// Dialect implements inboxdriver.Admin. MySQL and MariaDB are both
// inboxdriver.DialectMySQL.
func (d *Driver) Dialect() inboxdriver.Dialect { return d.dialect.schema() }

// Tables implements inboxdriver.Admin.
func (d *Driver) Tables() inboxdriver.Tables { return d.tables }

// BeginClaim implements inboxdriver.Driver. It never defers the claim.
func (d *Driver) BeginClaim(ctx context.Context, p *inboxdriver.ClaimParams) (*sql.Tx, []bool, error) {
	var claimed []bool
	tx, err := d.begin(ctx, p.LockTimeout, func(tx *sql.Tx, bounded bool) error {
		var err error
		claimed, err = d.claimIDs(ctx, tx, p, bounded)
		return err
	})
	if err != nil {
		return nil, nil, d.claimError(ctx, p.IDs, err)
	}
	d.track(tx)
	return tx, claimed, nil
}

// Claim implements inboxdriver.Driver, inside the caller's transaction.
func (d *Driver) Claim(ctx context.Context, tx *sql.Tx, p *inboxdriver.ClaimParams) ([]bool, error) {
	if d.dialect != SQLite || p.LockTimeout <= 0 {
		claimed, err := d.claimIDs(ctx, tx, p, false)
		return claimed, d.claimError(ctx, p.IDs, err)
	}
	// The caller's transaction may have begun DEFERRED, in which case the
	// claim is what waits for the write lock: bound that wait.
	var claimed []bool
	err := withBusyTimeout(ctx, tx, p.LockTimeout, func() error {
		var err error
		claimed, err = d.claimIDs(ctx, tx, p, true)
		return err
	})
	return claimed, err
}

// claimIDs claims p.IDs in tx: one id with the one-row claim, many with
// the batch claim.
func (d *Driver) claimIDs(ctx context.Context, tx *sql.Tx, p *inboxdriver.ClaimParams, bounded bool) ([]bool, error) {
	if len(p.IDs) != 1 {
		return d.claimBatch(ctx, tx, p.Consumer, p.IDs, p.LockTimeout, bounded)
	}
	claimed, err := d.claim(ctx, tx, p.Consumer, p.IDs[0], p.LockTimeout, bounded)
	if err != nil {
		return nil, err
	}
	return []bool{claimed}, nil
}

// begin begins a transaction and runs claim in it. bounded tells claim
// that the dialect's lock wait is already bounded by lockTimeout (SQLite's
// busy timeout). On error the transaction is rolled back.
func (d *Driver) begin(ctx context.Context, lockTimeout time.Duration, claim func(tx *sql.Tx, bounded bool) error) (*sql.Tx, error) {
	if d.dialect == SQLite && lockTimeout > 0 {
		return d.beginSQLite(ctx, lockTimeout, claim)
	}
	tx, err := d.db.BeginTx(ctx, d.txOptions)
	if err != nil {
		return nil, err
	}
	if err := claim(tx, false); err != nil {
		_ = tx.Rollback()
		return nil, err
	}
	return tx, nil
}

// Commit implements inboxdriver.Driver.
func (d *Driver) Commit(ctx context.Context, tx *sql.Tx) error {
	err := tx.Commit()
	d.release(tx)
	return err
}

// Rollback implements inboxdriver.Driver.
func (d *Driver) Rollback(ctx context.Context, tx *sql.Tx) error {
	err := tx.Rollback()
	d.release(tx)
	if errors.Is(err, sql.ErrTxDone) {
		return nil
	}
	return err
}

// release returns the connection that BeginClaim pinned for tx, if any, to
// the pool, and forgets tx as open.
func (d *Driver) release(tx *sql.Tx) {
	if c, ok := d.pinned.LoadAndDelete(tx); ok {
		_ = c.(*sql.Conn).Close()
	}
	if _, ok := d.open.LoadAndDelete(tx); ok {
		d.openN.Add(-1)
	}
}

// track records tx as open until Commit or Rollback, where a ledger write
// needs to know it (SQLite, ledger in the inbox's file).
func (d *Driver) track(tx *sql.Tx) {
	if d.dialect == SQLite && d.effectsDB == nil {
		d.openN.Add(1)
		d.open.Store(tx, struct{}{})
	}
}

// markClaimed maps the ids a claim returned onto ids.
func markClaimed(ids []string, returned []string) ([]bool, error) {
	at := make(map[string]int, len(ids))
	for i, id := range ids {
		at[id] = i
	}
	out := make([]bool, len(ids))
	for _, id := range returned {
		i, ok := at[id]
		if !ok {
			return nil, fmt.Errorf("inboxsql: the claim stored id %q, which was not asked for", id)
		}
		if out[i] {
			return nil, fmt.Errorf("inboxsql: the claim returned id %q twice", id)
		}
		out[i] = true
	}
	return out, nil
}

// ctxWithoutCancel is the context of cleanups that must run even when ctx
// is cancelled, bounded in time.
func ctxWithoutCancel(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
}
