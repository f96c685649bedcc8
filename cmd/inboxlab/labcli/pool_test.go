package labcli

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver testdb creates schemas with

	"github.com/txinbox/inbox/internal/testdb"
)

var pools = testdb.Shared[*pgxpool.Pool]{Query: testdb.PgxPool}

// testPool returns the pool that the tests of this binary share.
func testPool(t testing.TB) *pgxpool.Pool { return pools.Get(t, pgxpool.New, (*pgxpool.Pool).Close) }
