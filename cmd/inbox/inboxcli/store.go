package inboxcli

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxmigrate"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/inboxsql"
	"github.com/txinbox/inbox/inboxsql/inboxmysql"
	"github.com/txinbox/inbox/inboxsql/inboxsqlite"
	"github.com/txinbox/inbox/internal/command"
	"github.com/txinbox/inbox/internal/pgexec"
)

// storeFlags are the flags that say which store and tables a command uses.
type storeFlags struct {
	databaseURL string
	effectsDB   string
	tables      inboxdriver.Tables
	idType      string
	// partitions configure a partitioned inbox (inbox partitions).
	partitions inboxdriver.PartitionConfig
}

func (f *storeFlags) register(fs *command.FlagSet) {
	fs.StringVar(&f.databaseURL, "database-url", "", "the database: postgres://…, mysql://user:password@host:port/database, sqlite:PATH or file:PATH; defaults to $DATABASE_URL, then the PG* variables")
	fs.StringVar(&f.tables.Schema, "schema", "", "the schema (the database, on MySQL) that holds the inbox tables (default: the search_path, or the URL's database)")
	fs.StringVar(&f.tables.Inbox, "table", inboxdriver.DefaultInboxTable, "the inbox table")
	fs.StringVar(&f.idType, "id-type", "", "the type of the message_id column: uuid or text (default: the column's type in the database; uuid for tables not made yet)")
	fs.StringVar(&f.effectsDB, "effects-db", "", "SQLite only: the file of the effects ledger, when it is kept apart from the inbox (inboxsql.Config.EffectsDB)")
}

// store is an open store.
type store struct {
	admin inboxdriver.Admin
	// catalog reads the database's catalog: admin's.
	catalog inboxdriver.Catalog
	// ledger is the separate store of the effects ledger, if any: it is
	// migrated too.
	ledger inboxdriver.Admin
	close  func()
	// where names the database for messages, without a password.
	where string
	// schema is the --schema flag, for messages.
	schema string
}

// explain turns an error of a command that needs the inbox tables into one
// that says what to do, when the tables (or a column of a later migration)
// are missing: the database is named, and 'inbox migrate up' suggested;
// or, when the version table records the migrations that made them, that
// these table names were never migrated there. Other errors are returned as
// they are.
func (s *store) explain(ctx context.Context, err error) error {
	if err == nil || !s.notMigrated(err) {
		return err
	}
	in := "the database at " + s.where
	if s.schema != "" {
		in = fmt.Sprintf("schema %q of %s", s.schema, in)
	}
	if m, merr := inboxmigrate.New(s.admin); merr == nil {
		// The migrator's own words, which 'inbox migrate' and doctor say.
		if terr := m.CheckTables(ctx); errors.Is(terr, inboxmigrate.ErrTablesMissing) {
			return &saidError{msg: fmt.Sprintf("%s: %s (--schema)", in, command.Message(terr)), err: err}
		}
	}
	return &saidError{msg: fmt.Sprintf("the inbox tables in %s are missing or not migrated to the latest version (%s): run 'inbox migrate up' with the same flags", in, command.Message(cause(err))), err: err}
}

// saidError is an error a command says in its own words, for an error of
// the store or of the root package whose meaning (its sentinel) it knows.
// It keeps that error for errors.Is and errors.As.
type saidError struct {
	msg string
	err error
}

func (e *saidError) Error() string { return e.msg }
func (e *saidError) Unwrap() error { return e.err }

// notMigrated reports whether err, which is not nil, says that a table or
// a column the store needs is missing: the store's Classify says so, for
// its own errors and for the root package's, which carry its class as
// inbox.ErrNotMigrated.
func (s *store) notMigrated(err error) bool {
	return errors.Is(err, inbox.ErrNotMigrated) || s.admin.Classify(err) == inboxdriver.ClassNotMigrated
}

// cause is the innermost error that err wraps: the server's own words.
// Of an error that wraps several, such as the root package's marking of a
// store's error with its sentinel, it follows the last: the store's.
func cause(err error) error {
	for {
		switch u := err.(type) {
		case interface{ Unwrap() []error }:
			errs := u.Unwrap()
			if len(errs) == 0 {
				return err
			}
			err = errs[len(errs)-1]
		case interface{ Unwrap() error }:
			next := u.Unwrap()
			if next == nil {
				return err
			}
			err = next
		default:
			return err
		}
	}
}

// checkIDType validates --id-type and sets the tables' id type from it:
// uuid when it is not given, until settle reads the column's.
func (f *storeFlags) checkIDType() error {
	switch f.idType {
	case "":
		f.tables.IDType = inboxdriver.IDTypeUUID
	case string(inboxdriver.IDTypeUUID), string(inboxdriver.IDTypeText):
		f.tables.IDType = inboxdriver.IDType(f.idType)
	default:
		return command.Usagef("--id-type %q: want uuid or text", f.idType)
	}
	return nil
}

// settle reads from probe's catalog what the flags leave to the database,
// a store's built with f.tables: the inbox's layout, read rather than
// flagged so that no command runs the plain table's statements on a
// partitioned one (a purge by ctid would delete the wrong rows), and the
// type of its id column, which --id-type must match. It reports whether
// f.tables changed, so that the caller builds the store again.
func (f *storeFlags) settle(ctx context.Context, probe inboxdriver.Catalog) (changed bool, err error) {
	if f.tables.Layout == "" {
		layout, err := probe.InboxLayout(ctx)
		if err != nil {
			return false, fmt.Errorf("cannot read the inbox table's layout: %w", err)
		}
		if layout != inboxdriver.LayoutPlain {
			f.tables.Layout, changed = layout, true
		}
	}
	col, err := probe.InboxIDType(ctx)
	switch {
	case errors.Is(err, errors.ErrUnsupported), err == nil && col == "":
		// No column to read: the flag's, or uuid.
	case err != nil:
		return false, fmt.Errorf("cannot read the type of the inbox's message_id column: %w", err)
	case f.idType != "" && inboxdriver.IDType(f.idType) != col:
		return false, command.Usagef("--id-type %s: the message_id column of table %s is %s", f.idType, f.tables.WithDefaults().Inbox, col)
	case col != f.tables.IDType:
		f.tables.IDType, changed = col, true
	}
	return changed, nil
}

// config returns base, or a zero config, with the id format of the
// store's id column.
func (s *store) config(base *inbox.Config) *inbox.Config {
	var cfg inbox.Config
	if base != nil {
		cfg = *base
	}
	if s.admin.Tables().IDType == inboxdriver.IDTypeText {
		cfg.IDFormat = inbox.IDFormatText
	}
	return &cfg
}

// open connects to the store the flags name and checks that it answers.
func (f *storeFlags) open(ctx context.Context, e *Env) (*store, error) {
	raw := f.databaseURL
	if raw == "" {
		raw = e.Getenv("DATABASE_URL")
	}
	if err := f.checkIDType(); err != nil {
		return nil, err
	}
	if f.effectsDB != "" && !strings.HasPrefix(raw, "sqlite:") && !strings.HasPrefix(raw, "file:") {
		return nil, command.Usagef("--effects-db is for SQLite only: other stores keep the ledger beside the inbox")
	}
	scheme := ""
	if i := strings.Index(raw, ":"); i > 0 {
		scheme = raw[:i]
	}
	// The names are checked before any database is reached.
	dialect := map[string]inboxdriver.Dialect{"sqlite": inboxdriver.DialectSQLite, "file": inboxdriver.DialectSQLite, "mysql": inboxdriver.DialectMySQL}[scheme]
	if dialect == "" {
		dialect = inboxdriver.DialectPostgres
	}
	if err := f.tables.Validate(dialect); err != nil {
		return nil, command.Usagef("%v", err)
	}
	var st *store
	var err error
	switch scheme {
	case "", "postgres", "postgresql":
		st, err = f.openPostgres(ctx, raw)
	case "sqlite":
		// sqlite:PATH, and sqlite://PATH as some tools write it.
		path := strings.TrimPrefix(strings.TrimPrefix(raw, "sqlite:"), "//")
		st, err = f.openSQLite(path)
	case "file":
		st, err = f.openSQLite(raw)
	case "mysql":
		st, err = f.openMySQL(ctx, raw)
	default:
		return nil, command.Usagef("--database-url: unsupported scheme %q: want postgres://, mysql://, sqlite: or file:", scheme)
	}
	if err != nil {
		return nil, err
	}
	st.schema = f.tables.Schema
	cat, ok := st.admin.(inboxdriver.Catalog)
	if !ok {
		st.close()
		return nil, fmt.Errorf("the store %T cannot read its catalog (inboxdriver.Catalog)", st.admin)
	}
	st.catalog = cat
	return st, nil
}

// openSQLite opens a SQLite database file, creating it if need be.
func (f *storeFlags) openSQLite(path string) (*store, error) {
	if path == "" {
		return nil, command.Usagef("--database-url: want sqlite:PATH, with the path of the database file")
	}
	db, err := inboxsqlite.Open(path)
	if err != nil {
		return nil, fmt.Errorf("cannot open the database at %s: %w", path, err)
	}
	if f.effectsDB == "" {
		return f.sqlStore(context.Background(), db, inboxsqlite.Engine, path)
	}
	edb, err := inboxsqlite.Open(f.effectsDB)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("cannot open the effects database at %s: %w", f.effectsDB, err)
	}
	ledger, err := inboxsql.New(edb, inboxsqlite.Engine, &inboxsql.Config{Tables: f.tables})
	if err != nil {
		db.Close()
		edb.Close()
		return nil, command.Usagef("%v", err)
	}
	d, err := inboxsql.New(db, inboxsqlite.Engine, &inboxsql.Config{Tables: f.tables, EffectsDB: edb})
	if err != nil {
		db.Close()
		edb.Close()
		return nil, command.Usagef("%v", err)
	}
	return &store{
		admin:  d,
		ledger: ledger,
		close:  func() { db.Close(); edb.Close() },
		where:  path,
	}, nil
}

// openMySQL connects to MySQL or MariaDB, telling them apart by the
// server's version.
func (f *storeFlags) openMySQL(ctx context.Context, raw string) (*store, error) {
	cfg, where, err := mysqlConfig(raw)
	if err != nil {
		return nil, command.Usagef("--database-url: %w", err)
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, command.Usagef("--database-url: %w", err)
	}
	db := sql.OpenDB(connector)
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var version string
	if err := db.QueryRowContext(pctx, `SELECT VERSION()`).Scan(&version); err != nil {
		db.Close()
		return nil, fmt.Errorf("cannot reach the database at %s: %w", where, err)
	}
	engine := inboxmysql.MySQL
	if strings.Contains(strings.ToLower(version), "mariadb") {
		engine = inboxmysql.MariaDB
	}
	return f.sqlStore(pctx, db, engine, where)
}

// mysqlConfig converts a mysql://user:password@host:port/database?param=value
// URL to go-sql-driver's Config. The parameters are the driver's. The
// password is set on the Config, never written into a DSN the driver
// parses, so that no error of the parse can show it.
func mysqlConfig(raw string) (cfg *mysql.Config, where string, err error) {
	u, pw, _, err := parseDatabaseURL(raw)
	if err != nil {
		return nil, "", err
	}
	noPW := mysql.NewConfig()
	noPW.User = u.User.Username()
	noPW.Net = "tcp"
	host, port := u.Hostname(), u.Port()
	if host == "" {
		host = "127.0.0.1"
	}
	if port == "" {
		port = "3306"
	}
	noPW.Addr = net.JoinHostPort(host, port)
	noPW.DBName = strings.TrimPrefix(u.Path, "/")
	if noPW.DBName == "" || strings.Contains(noPW.DBName, "/") {
		return nil, "", fmt.Errorf("%s: want mysql://user:password@host:port/database", u.Redacted())
	}
	dsn := noPW.FormatDSN()
	if u.RawQuery != "" {
		sep := "?"
		if strings.Contains(dsn, "?") {
			sep = "&"
		}
		dsn += sep + u.RawQuery
	}
	if cfg, err = mysql.ParseDSN(dsn); err != nil {
		return nil, "", err
	}
	cfg.Passwd = pw
	return cfg, noPW.Addr + "/" + noPW.DBName, nil
}

// parseDatabaseURL parses a --database-url and returns it without its
// password, and the password apart, for the caller to give the driver in
// its config: no error of a driver's parse or connection can then show the
// password, for the driver never sees it in a string. A URL that does not
// parse is reported by what is wrong with it, without the URL, which
// url.Error quotes whole, password and all.
func parseDatabaseURL(raw string) (u *url.URL, password string, hasPassword bool, err error) {
	u, err = url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			return nil, "", false, ue.Err
		}
		return nil, "", false, err
	}
	if password, hasPassword = u.User.Password(); hasPassword {
		u.User = url.User(u.User.Username())
	}
	return u, password, hasPassword, nil
}

// sqlStore wraps an open *sql.DB.
func (f *storeFlags) sqlStore(ctx context.Context, db *sql.DB, engine inboxsql.Engine, where string) (*store, error) {
	d, err := inboxsql.New(db, engine, &inboxsql.Config{Tables: f.tables})
	if err != nil {
		db.Close()
		return nil, command.Usagef("%v", err)
	}
	changed, err := f.settle(ctx, d)
	if err != nil {
		db.Close()
		return nil, err
	}
	if changed {
		if d, err = inboxsql.New(db, engine, &inboxsql.Config{Tables: f.tables}); err != nil {
			db.Close()
			return nil, command.Usagef("%v", err)
		}
	}
	return &store{
		admin: d,
		close: func() { db.Close() },
		where: where,
	}, nil
}

func (f *storeFlags) openPostgres(ctx context.Context, raw string) (*store, error) {
	// An empty string makes pgx read the PG* variables, as libpq does.
	// A pooler-safe exec mode unless the URL names one (see pgexec).
	// A URL's password is set on the config after the parse (see
	// parseDatabaseURL); a connection string in the key=value form is
	// pgx's to parse, and its parse errors hide a password=.
	var password string
	hasPassword := false
	if strings.HasPrefix(raw, "postgres://") || strings.HasPrefix(raw, "postgresql://") {
		var u *url.URL
		var err error
		if u, password, hasPassword, err = parseDatabaseURL(raw); err != nil {
			return nil, command.Usagef("--database-url: %w", err)
		}
		raw = u.String()
	}
	cfg, err := pgxpool.ParseConfig(pgexec.WithPoolerSafe(raw))
	if err != nil {
		return nil, command.Usagef("--database-url: %w", err)
	}
	if hasPassword {
		cfg.ConnConfig.Password = password
	}
	database := cfg.ConnConfig.Database
	if database == "" {
		database = cfg.ConnConfig.User // the server's default
	}
	where := fmt.Sprintf("%s:%d/%s", cfg.ConnConfig.Host, cfg.ConnConfig.Port, database)
	if raw == "" {
		// libpq's defaults: the PG* variables, else a local socket and a
		// database named after the user, which is rarely the one meant.
		where += " (no --database-url or DATABASE_URL: the PG* variables and libpq's defaults chose it)"
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(pctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("cannot reach the database at %s: %w", where, err)
	}
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("cannot reach the database at %s: %w", where, err)
	}
	d, err := inboxpgx.New(pool, &inboxpgx.Config{Tables: f.tables, Partitions: f.partitions})
	if err != nil {
		pool.Close()
		return nil, command.Usagef("%v", err)
	}
	changed, err := f.settle(pctx, d)
	if err != nil {
		pool.Close()
		return nil, err
	}
	if changed {
		if d, err = inboxpgx.New(pool, &inboxpgx.Config{Tables: f.tables, Partitions: f.partitions}); err != nil {
			pool.Close()
			return nil, command.Usagef("%v", err)
		}
	}
	return &store{
		admin: d,
		close: pool.Close,
		where: where,
	}, nil
}
