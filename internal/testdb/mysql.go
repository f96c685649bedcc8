package testdb

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	neturl "net/url"
	"sync"
	"testing"
	"time"
)

// MySQL and MariaDB tests use the server named by TEST_MYSQL_URL, a
// mysql://user:password@host:port/database URL, or DefaultMySQLURL. Each
// test gets a database of its own (MySQL), dropped on cleanup. When the
// server does not answer, the test is skipped, or fails in CI. The test
// binary registers the "mysql" database/sql driver by importing
// github.com/go-sql-driver/mysql.

// DefaultMySQLURL is the machine's MariaDB.
const DefaultMySQLURL = "mysql://root@127.0.0.1:3306/test"

// MaxMySQLConns bounds the pool of each test database. MariaDB allows 151
// connections by default, and tests run in parallel.
const MaxMySQLConns = 16

var (
	mysqlOnce  sync.Once
	mysqlCfg   *mysqlConfig
	mysqlAdmin *sql.DB
	mysqlErr   error
)

// MySQLURL returns the URL of the test MySQL or MariaDB server.
func MySQLURL() string { return envOr("TEST_MYSQL_URL", DefaultMySQLURL) }

// mysqlConfig is the part of a mysql:// URL a DSN needs.
type mysqlConfig struct {
	user, password, addr string
}

// parseMySQLURL parses a mysql://user:password@host:port/database URL.
func parseMySQLURL(raw string) (*mysqlConfig, error) {
	u, err := neturl.Parse(raw)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "mysql" {
		return nil, fmt.Errorf("TEST_MYSQL_URL %q: want mysql://user:password@host:port/database", raw)
	}
	port := u.Port()
	if port == "" {
		port = "3306"
	}
	pw, _ := u.User.Password()
	return &mysqlConfig{user: u.User.Username(), password: pw, addr: net.JoinHostPort(u.Hostname(), port)}, nil
}

// dsn returns go-sql-driver/mysql's DSN for database on the server:
// user:password@tcp(host:port)/database?timeout=3s. The driver takes the
// password verbatim up to the last '@'.
func (c *mysqlConfig) dsn(database string) string {
	cred := c.user
	if c.password != "" {
		cred += ":" + c.password
	}
	return fmt.Sprintf("%s@tcp(%s)/%s?timeout=3s", cred, c.addr, database)
}

func mysqlSetup() {
	raw := MySQLURL()
	mysqlCfg, mysqlErr = parseMySQLURL(raw)
	if mysqlErr != nil {
		return
	}
	mysqlAdmin, mysqlErr = sql.Open("mysql", mysqlCfg.dsn(""))
	if mysqlErr != nil {
		mysqlErr = fmt.Errorf("%w (the test binary must import github.com/go-sql-driver/mysql)", mysqlErr)
		return
	}
	mysqlAdmin.SetMaxOpenConns(4)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := mysqlAdmin.PingContext(ctx); err != nil {
		mysqlErr = fmt.Errorf("%s: %w", redactURL(raw), err)
	}
}

func redactURL(raw string) string {
	u, err := neturl.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// MySQLDatabase creates a database with a random name on the test server,
// drops it when t ends, and returns a mysql:// URL that names it, and its
// name. It skips t, or fails it in CI, when the server does not answer.
func MySQLDatabase(t testing.TB) (string, string) {
	t.Helper()
	mysqlOnce.Do(mysqlSetup)
	Require(t, "MySQL/MariaDB", mysqlErr)
	name := "inbox_test_" + RandomSuffix()
	ctx := context.Background()
	if _, err := mysqlAdmin.ExecContext(ctx, "CREATE DATABASE `"+name+"` CHARACTER SET utf8mb4"); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		if err := dropMySQLDatabase(name); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u, err := neturl.Parse(MySQLURL())
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String(), name
}

// MySQL returns a pool on a fresh database of its own (see
// MySQLDatabase), closed and dropped when t ends, and the database's name.
func MySQL(t testing.TB) (*sql.DB, string) {
	t.Helper()
	_, name := MySQLDatabase(t)
	db, err := sql.Open("mysql", MySQLDSN(t, name))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(MaxMySQLConns)
	// Registered after the drop, so it runs before it.
	t.Cleanup(func() { db.Close() })
	return db, name
}

// MySQLDSN returns the go-sql-driver DSN of database on the test server.
func MySQLDSN(t testing.TB, database string) string {
	t.Helper()
	mysqlOnce.Do(mysqlSetup)
	Require(t, "MySQL/MariaDB", mysqlErr)
	return mysqlCfg.dsn(database)
}

// dropMySQLDatabase drops a test database. A failed test can leave a
// transaction open on it, whose metadata lock would make the DROP wait
// forever: the wait is bounded.
func dropMySQLDatabase(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := mysqlAdmin.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SET SESSION lock_wait_timeout = 10"); err != nil {
		return err
	}
	_, err = conn.ExecContext(ctx, "DROP DATABASE `"+name+"`")
	return err
}
