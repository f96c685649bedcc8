package testdb

import (
	"context"
	"database/sql"
	neturl "net/url"
	"testing"
	"time"
)

// Role creates a login role with a random name, to which a test grants
// exactly the privileges it means to test, and returns its name and a URL
// of the test server that logs in as it. The test server trusts local
// logins, so the role needs no password.
//
// When t ends, the role's sessions are ended and the role is dropped with
// the privileges granted to it in the test database and any setting made
// for it (ALTER ROLE … SET): nothing it changed outlives the test, even
// when the test fails. Privileges on other databases must be revoked, or
// those databases dropped, by cleanups registered after Role's, which run
// before it.
func Role(t testing.TB) (string, string) {
	t.Helper()
	db := adminDB(t)
	name := "inbox_role_" + RandomSuffix()
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE ROLE `+quoteIdent(name)+` LOGIN`); err != nil {
		t.Fatalf("create role %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, stmt := range []string{
			`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '` + name + `'`,
			`DROP OWNED BY ` + quoteIdent(name),
			`DROP ROLE ` + quoteIdent(name),
		} {
			if _, err := db.ExecContext(ctx, stmt); err != nil {
				t.Errorf("drop role %s: %s: %v", name, stmt, err)
				return
			}
		}
	})
	u, err := neturl.Parse(URL(t))
	if err != nil {
		t.Fatalf("test server URL: %v", err)
	}
	u.User = neturl.User(name)
	return name, u.String()
}

// Exec runs statements on the test server as its superuser, failing t on
// the first error.
func Exec(t testing.TB, stmts ...string) {
	t.Helper()
	db := adminDB(t)
	for _, stmt := range stmts {
		if _, err := db.ExecContext(context.Background(), stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
}

// QuoteIdent quotes a Postgres identifier.
func QuoteIdent(name string) string { return quoteIdent(name) }

// Database creates a database with a random name on the test server for t
// and its subtests, and returns its name, a URL that names it (as the
// superuser) and a small database/sql pool on it, as the superuser. CONNECT
// on it is revoked from PUBLIC, so that a role connects only when a test
// grants it CONNECT, and a test can revoke that again without touching
// any other role or database. When t ends, the pool is closed and the
// database dropped, with any session still on it.
func Database(t testing.TB) (string, string, *sql.DB) {
	t.Helper()
	admin := adminDB(t)
	name := "inbox_test_db_" + RandomSuffix()
	ctx := context.Background()
	if _, err := admin.ExecContext(ctx, `CREATE DATABASE `+quoteIdent(name)); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := admin.ExecContext(ctx, `DROP DATABASE `+quoteIdent(name)+` WITH (FORCE)`); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	if _, err := admin.ExecContext(ctx, `REVOKE CONNECT ON DATABASE `+quoteIdent(name)+` FROM PUBLIC`); err != nil {
		t.Fatalf("revoke CONNECT on %s from PUBLIC: %v", name, err)
	}
	u, err := neturl.Parse(URL(t))
	if err != nil {
		t.Fatalf("test server URL: %v", err)
	}
	u.Path = "/" + name
	db, err := sql.Open(PostgresDriver, u.String())
	if err != nil {
		t.Fatalf("open %s: %v", name, err)
	}
	db.SetMaxOpenConns(4)
	t.Cleanup(func() { db.Close() })
	return name, u.String(), db
}
