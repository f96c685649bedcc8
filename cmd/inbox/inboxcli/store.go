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
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/inboxsql"
	"github.com/txinbox/inbox/inboxsql/inboxmysql"
	"github.com/txinbox/inbox/inboxsql/inboxsqlite"
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

func (f *storeFlags) register(fs *flagSet) {
	fs.StringVar(&f.databaseURL, "database-url", "", "the database: postgres://…, mysql://user:password@host:port/database, sqlite:PATH or file:PATH; defaults to $DATABASE_URL, then the PG* variables")
	fs.StringVar(&f.tables.Schema, "schema", "", "the schema (the database, on MySQL) that holds the inbox tables (default: the search_path, or the URL's database)")
	fs.StringVar(&f.tables.Inbox, "table", inboxdriver.DefaultInboxTable, "the inbox table")
	fs.StringVar(&f.idType, "id-type", string(inboxdriver.IDTypeUUID), "the type of the message_id column: uuid or text")
	fs.StringVar(&f.effectsDB, "effects-db", "", "SQLite only: the file of the effects ledger, when it is kept apart from the inbox (inboxsql.Config.EffectsDB)")
}

// store is an open store.
type store struct {
	admin inboxdriver.Admin
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
// are missing: the database is named, and 'inbox migrate up' suggested.
// Other errors are returned as they are.
func (s *store) explain(err error) error {
	if err == nil {
		return nil
	}
	what, ok := missingTable(err)
	if !ok {
		return err
	}
	in := "the database at " + s.where
	if s.schema != "" {
		in = fmt.Sprintf("schema %q of %s", s.schema, in)
	}
	return &missingTablesError{msg: fmt.Sprintf("the inbox tables in %s are missing or not migrated to the latest version (%s): run 'inbox migrate up' with the same flags", in, what), err: err}
}

// missingTablesError is an error that store.explain rewrote. It keeps the
// store's error for errors.Is and errors.As.
type missingTablesError struct {
	msg string
	err error
}

func (e *missingTablesError) Error() string { return e.msg }
func (e *missingTablesError) Unwrap() error { return e.err }

// missingTable reports whether err says that a table or a column does not
// exist, and returns the server's words for it.
func missingTable(err error) (string, bool) {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// undefined_table, undefined_column, invalid_schema_name
		return pgErr.Message, pgErr.Code == "42P01" || pgErr.Code == "42703" || pgErr.Code == "3F000"
	}
	var myErr *mysql.MySQLError
	if errors.As(err, &myErr) {
		// ER_NO_SUCH_TABLE, ER_BAD_FIELD_ERROR
		return myErr.Message, myErr.Number == 1146 || myErr.Number == 1054
	}
	// SQLite reports both with its generic result code, SQLITE_ERROR, in
	// a message such as "SQL logic error: no such table: inbox (1)".
	msg := err.Error()
	for _, m := range []string{"no such table", "no such column"} {
		if i := strings.Index(msg, m); i >= 0 {
			return strings.TrimSuffix(msg[i:], " (1)"), true
		}
	}
	return "", false
}

// checkIDType validates --id-type and sets the tables' id type from it.
func (f *storeFlags) checkIDType() error {
	switch f.idType {
	case string(inboxdriver.IDTypeUUID), string(inboxdriver.IDTypeText):
		f.tables.IDType = inboxdriver.IDType(f.idType)
		return nil
	default:
		return usagef("--id-type %q: want uuid or text", f.idType)
	}
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
		return nil, usagef("--effects-db is for SQLite only: other stores keep the ledger beside the inbox")
	}
	scheme := ""
	if i := strings.Index(raw, ":"); i > 0 {
		scheme = raw[:i]
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
		return nil, usagef("--database-url: unsupported scheme %q: want postgres://, mysql://, sqlite: or file:", scheme)
	}
	if err != nil {
		return nil, err
	}
	st.schema = f.tables.Schema
	return st, nil
}

// openSQLite opens a SQLite database file, creating it if need be.
func (f *storeFlags) openSQLite(path string) (*store, error) {
	if path == "" {
		return nil, usagef("--database-url: want sqlite:PATH, with the path of the database file")
	}
	db, err := inboxsqlite.Open(path)
	if err != nil {
		return nil, fmt.Errorf("cannot open the database at %s: %w", path, err)
	}
	if f.effectsDB == "" {
		return f.sqlStore(db, inboxsqlite.Engine, path)
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
		return nil, usagef("%v", err)
	}
	d, err := inboxsql.New(db, inboxsqlite.Engine, &inboxsql.Config{Tables: f.tables, EffectsDB: edb})
	if err != nil {
		db.Close()
		edb.Close()
		return nil, usagef("%v", err)
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
	dsn, where, err := mysqlDSN(raw)
	if err != nil {
		return nil, usagef("--database-url: %v", redactErr(err, raw))
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return nil, usagef("--database-url: %v", redactErr(err, raw))
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var version string
	if err := db.QueryRowContext(pctx, `SELECT VERSION()`).Scan(&version); err != nil {
		db.Close()
		return nil, fmt.Errorf("cannot reach the database at %s: %w", where, redactErr(err, raw))
	}
	engine := inboxmysql.MySQL
	if strings.Contains(strings.ToLower(version), "mariadb") {
		engine = inboxmysql.MariaDB
	}
	return f.sqlStore(db, engine, where)
}

// mysqlDSN converts a mysql://user:password@host:port/database?param=value
// URL to go-sql-driver's DSN. The parameters are the driver's.
func mysqlDSN(raw string) (dsn, where string, err error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", "", err
	}
	cfg := mysql.NewConfig()
	cfg.User = u.User.Username()
	cfg.Passwd, _ = u.User.Password()
	cfg.Net = "tcp"
	host, port := u.Hostname(), u.Port()
	if host == "" {
		host = "127.0.0.1"
	}
	if port == "" {
		port = "3306"
	}
	cfg.Addr = net.JoinHostPort(host, port)
	cfg.DBName = strings.TrimPrefix(u.Path, "/")
	if cfg.DBName == "" || strings.Contains(cfg.DBName, "/") {
		return "", "", fmt.Errorf("%s: want mysql://user:password@host:port/database", u.Redacted())
	}
	dsn = cfg.FormatDSN()
	if u.RawQuery != "" {
		sep := "?"
		if strings.Contains(dsn, "?") {
			sep = "&"
		}
		dsn += sep + u.RawQuery
		if _, err := mysql.ParseDSN(dsn); err != nil {
			return "", "", err
		}
	}
	return dsn, cfg.Addr + "/" + cfg.DBName, nil
}

// sqlStore wraps an open *sql.DB.
func (f *storeFlags) sqlStore(db *sql.DB, engine inboxsql.Engine, where string) (*store, error) {
	d, err := inboxsql.New(db, engine, &inboxsql.Config{Tables: f.tables})
	if err != nil {
		db.Close()
		return nil, usagef("%v", err)
	}
	return &store{
		admin: d,
		close: func() { db.Close() },
		where: where,
	}, nil
}

func (f *storeFlags) openPostgres(ctx context.Context, raw string) (*store, error) {
	// An empty string makes pgx read the PG* variables, as libpq does.
	cfg, err := pgxpool.ParseConfig(raw)
	if err != nil {
		return nil, usagef("--database-url: %v", redactErr(err, raw))
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
		return nil, fmt.Errorf("cannot reach the database at %s: %w", where, redactErr(err, raw))
	}
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("cannot reach the database at %s: %w", where, redactErr(err, raw))
	}
	if f.tables.Layout == "" {
		if f.tables.Layout, err = detectLayout(pctx, pool, f.tables); err != nil {
			pool.Close()
			return nil, fmt.Errorf("cannot read the inbox table's layout at %s: %w", where, err)
		}
	}
	d, err := inboxpgx.New(pool, &inboxpgx.Config{Tables: f.tables, Partitions: f.partitions})
	if err != nil {
		pool.Close()
		return nil, usagef("%v", err)
	}
	return &store{
		admin: d,
		close: pool.Close,
		where: where,
	}, nil
}

// redactErr removes a URL's password from err's message.
func redactErr(err error, raw string) error {
	u, perr := url.Parse(raw)
	if perr != nil || u.User == nil {
		return err
	}
	pw, ok := u.User.Password()
	if !ok || pw == "" {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), pw, "xxxxx"))
}
