// Package testdb gives tests a real Postgres: the server named by
// TEST_DATABASE_URL, the machine's local server by default, or a throwaway
// cluster started from the local PostgreSQL binaries when nothing answers.
//
// Tests isolate themselves with a random schema (Schema) that is dropped on
// cleanup, so they can run in parallel.
//
// Environment:
//
//	TEST_DATABASE_URL  the server to use; default DefaultURL
//	TEST_POSTGRES      "throwaway" always starts a throwaway cluster
//	CI                 "true" turns a missing Postgres into a failure
//
// Call Main from TestMain so the throwaway cluster stops when the tests end;
// on Linux it also stops if the test binary dies, through a parent-death
// signal.
//
// The package needs only the standard library, so that it lives in the
// root module: it talks to Postgres through database/sql with the driver
// named PostgresDriver, which the test binary registers by importing
// github.com/jackc/pgx/v5/stdlib, and to MySQL with "mysql" (import
// github.com/go-sql-driver/mysql). A module that wants a pool of its own
// driver makes it with Shared.
package testdb

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txinbox/inbox/internal/pgcluster"
)

// DefaultURL is the machine's local server.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// MaxConns is the size of the shared pool. Two test binaries run at once
// by default, and Postgres allows 100 connections.
const MaxConns = 34

// PostgresDriver is the database/sql driver name this package opens
// Postgres with: pgx's stdlib registers it.
const PostgresDriver = "pgx"

var (
	once      sync.Once
	url       string
	setupErr  error
	stopMu    sync.Mutex
	stopFuncs []func()
	adminOnce sync.Once
	admin     *sql.DB
	adminErr  error
)

// CI reports whether the tests run in CI, where a missing service fails.
func CI() bool { return os.Getenv("CI") == "true" }

// Require skips t, or fails it in CI, with err's message.
func Require(t testing.TB, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if CI() {
		t.Fatalf("%s is required in CI (CI=true): %v", what, err)
	}
	t.Skipf("%s unavailable, skipping (set CI=true to fail instead): %v", what, err)
}

// URL returns the URL of the test server, starting a throwaway cluster if
// need be.
func URL(t testing.TB) string {
	t.Helper()
	once.Do(setup)
	Require(t, "Postgres", setupErr)
	return url
}

// URLOrError returns the URL of the test server, starting a throwaway
// cluster if need be, or why there is none. It is for examples, which have
// no testing.TB to skip or fail.
func URLOrError() (string, error) {
	once.Do(setup)
	return url, setupErr
}

func setup() {
	if !slices.Contains(sql.Drivers(), PostgresDriver) {
		setupErr = fmt.Errorf("no database/sql driver %q: the test binary must import github.com/jackc/pgx/v5/stdlib", PostgresDriver)
		return
	}
	explicit := os.Getenv("TEST_DATABASE_URL")
	if os.Getenv("TEST_POSTGRES") != "throwaway" {
		url = explicit
		if url == "" {
			url = DefaultURL
		}
		err := ping(url)
		if err == nil || explicit != "" {
			if err != nil {
				setupErr = fmt.Errorf("TEST_DATABASE_URL %s: %w", explicit, err)
			}
			return
		}
	}
	var stop func()
	url, stop, setupErr = startThrowaway()
	if setupErr != nil {
		setupErr = fmt.Errorf("no server answers at %s, and a throwaway cluster could not start: %w", DefaultURL, setupErr)
		return
	}
	onStop(stop)
}

func ping(u string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	db, err := sql.Open(PostgresDriver, u)
	if err != nil {
		return fmt.Errorf("%w (the test binary must import github.com/jackc/pgx/v5/stdlib)", err)
	}
	defer db.Close()
	return db.PingContext(ctx)
}

// Main runs the tests and then stops the throwaway cluster, if one started.
func Main(m *testing.M) {
	code := m.Run()
	Stop()
	os.Exit(code)
}

// Stop closes the shared pools and stops the throwaway cluster, if one
// started. Main calls it.
func Stop() {
	stopMu.Lock()
	fs := stopFuncs
	stopFuncs = nil
	stopMu.Unlock()
	// Last registered, first stopped: pools before the cluster.
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}

func onStop(f func()) {
	stopMu.Lock()
	stopFuncs = append(stopFuncs, f)
	stopMu.Unlock()
}

// PgxPool is the Shared.Query of a pgx pool: MaxConns connections.
var PgxPool = "pool_max_conns=" + strconv.Itoa(MaxConns)

// withQuery adds query parameters (k=v&…) to a postgres:// URL.
func withQuery(u, query string) string {
	if strings.Contains(u, "?") {
		return u + "&" + query
	}
	return u + "?" + query
}

// Shared is a value made once per test binary from the test server's URL,
// such as a pool: its zero value is ready, and Stop closes the value.
type Shared[T any] struct {
	// Query, if set, is added to the URL's query, such as PgxPool.
	Query string

	once sync.Once
	v    T
	err  error
}

// Get returns the shared value, made on first use by open from URL(t) and
// closed by close when the tests end (Stop). It skips t, or fails it in CI,
// when open fails. For a pgx pool:
//
//	var pools = testdb.Shared[*pgxpool.Pool]{Query: testdb.PgxPool}
//	p := pools.Get(t, pgxpool.New, (*pgxpool.Pool).Close)
func (s *Shared[T]) Get(t testing.TB, open func(ctx context.Context, url string) (T, error), close func(T)) T {
	t.Helper()
	u := URL(t)
	if s.Query != "" {
		u = withQuery(u, s.Query)
	}
	s.once.Do(func() {
		s.v, s.err = open(context.Background(), u)
		if s.err == nil {
			v := s.v
			onStop(func() { close(v) })
		}
	})
	Require(t, "Postgres pool", s.err)
	return s.v
}

// adminDB returns the small database/sql pool this package creates and
// drops schemas with.
func adminDB(t testing.TB) *sql.DB {
	t.Helper()
	u := URL(t)
	adminOnce.Do(func() {
		admin, adminErr = sql.Open(PostgresDriver, u)
		if adminErr != nil {
			adminErr = fmt.Errorf("%w (the test binary must import github.com/jackc/pgx/v5/stdlib)", adminErr)
			return
		}
		admin.SetMaxOpenConns(4)
		db := admin
		onStop(func() { db.Close() })
	})
	Require(t, "Postgres", adminErr)
	return admin
}

// quoteIdent quotes a Postgres identifier.
func quoteIdent(name string) string {
	return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
}

// Schema creates a schema with a random name, drops it with everything in
// it when t ends, and returns its name.
func Schema(t testing.TB) string {
	t.Helper()
	db := adminDB(t)
	name := "inbox_test_" + RandomSuffix()
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE SCHEMA `+quoteIdent(name)); err != nil {
		t.Fatalf("create schema %s: %v", name, err)
	}
	t.Cleanup(func() {
		if _, err := db.ExecContext(context.Background(), `DROP SCHEMA `+quoteIdent(name)+` CASCADE`); err != nil {
			t.Errorf("drop schema %s: %v", name, err)
		}
	})
	return name
}

// RandomSuffix returns 12 random hex digits for names of test objects.
func RandomSuffix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// startThrowaway starts a lone server of its own (package pgcluster), quick
// rather than durable, and returns its URL and what stops it.
func startThrowaway() (string, func(), error) {
	c, err := pgcluster.Start(context.Background(), &pgcluster.Config{
		Settings: []string{"fsync=off", "synchronous_commit=off", "full_page_writes=off", "max_connections=200"},
	})
	if err != nil {
		return "", nil, err
	}
	return c.URL(), c.Close, nil
}

// SchemaURL creates a schema with a random name and returns a URL of the
// test server whose search_path is that schema, and a function that drops
// it. It is for examples, which have no testing.TB; tests use Schema.
func SchemaURL() (string, string, func(), error) {
	once.Do(setup)
	if setupErr != nil {
		return "", "", nil, setupErr
	}
	ctx := context.Background()
	name := "inbox_example_" + RandomSuffix()
	db, err := sql.Open(PostgresDriver, url)
	if err != nil {
		return "", "", nil, fmt.Errorf("%w (the example must import github.com/jackc/pgx/v5/stdlib)", err)
	}
	if _, err := db.ExecContext(ctx, `CREATE SCHEMA `+quoteIdent(name)); err != nil {
		db.Close()
		return "", "", nil, err
	}
	drop := func() {
		_, _ = db.ExecContext(context.Background(), `DROP SCHEMA `+quoteIdent(name)+` CASCADE`)
		db.Close()
	}
	return withQuery(url, "search_path="+name), name, drop, nil
}
