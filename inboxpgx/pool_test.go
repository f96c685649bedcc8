package inboxpgx_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver testdb creates schemas with

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox/internal/testdb"
)

var pools = testdb.Shared[*pgxpool.Pool]{Query: testdb.PgxPool}

// testPool returns the pool that the tests of this binary share.
func testPool(t testing.TB) *pgxpool.Pool { return pools.Get(t, pgxpool.New, (*pgxpool.Pool).Close) }

// execModes are pgx's query exec modes, as default_query_exec_mode names
// them in a URL; the first is pgx's default.
var execModes = []string{"cache_statement", "cache_describe", "describe_exec", "exec", "simple_protocol"}

// execModeOf maps execModes to pgx's values.
var execModeOf = map[string]pgx.QueryExecMode{
	"cache_statement": pgx.QueryExecModeCacheStatement,
	"cache_describe":  pgx.QueryExecModeCacheDescribe,
	"describe_exec":   pgx.QueryExecModeDescribeExec,
	"exec":            pgx.QueryExecModeExec,
	"simple_protocol": pgx.QueryExecModeSimpleProtocol,
}

// modePool returns a pool of t's own in query exec mode mode, closed when
// t ends, so that the modes' pools do not hold the shared server's
// connections at once.
func modePool(t testing.TB, mode string) *pgxpool.Pool {
	return ownPool(t, int32(testdb.MaxConns), func(cfg *pgxpool.Config) {
		cfg.ConnConfig.DefaultQueryExecMode = execModeOf[mode]
	})
}

// ownPool returns a pool of the test's own, closed when t ends, with at
// most maxConns connections; adjust, if not nil, changes the rest of its
// configuration first.
func ownPool(t testing.TB, maxConns int32, adjust func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testdb.URL(t))
	require.NoError(t, err)
	cfg.MaxConns = maxConns
	if adjust != nil {
		adjust(cfg)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}
