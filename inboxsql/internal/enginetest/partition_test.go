package inboxsql_test

import (
	"database/sql"
	"testing"
	"time"

	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxmigrate"
	"github.com/txinbox/inbox/inboxsql"
	"github.com/txinbox/inbox/inboxtest"
	"github.com/txinbox/inbox/internal/require"
	"github.com/txinbox/inbox/internal/testdb"
)

// partitionedPostgres is the sql-postgres engine over an inbox in the
// partitioned layout, with a short allowed clock skew so that the tests
// may keep a short retention.
func partitionedPostgres() engine {
	var e engine
	for _, pg := range engines {
		if pg.name == "sql-postgres" {
			e = pg
		}
	}
	e.name = "sql-postgres-partitioned"
	e.open = func(t *testing.T) (*sql.DB, inboxdriver.Tables) {
		return postgresPool(t), inboxdriver.Tables{Schema: testdb.Schema(t), Layout: inboxdriver.LayoutPartitioned}
	}
	e.partitions = inboxdriver.PartitionConfig{MaxSkew: time.Hour}
	return e
}

func TestConformancePartitioned(t *testing.T) {
	e := partitionedPostgres()
	t.Run(e.name, func(t *testing.T) {
		inboxtest.ExercisePartitioned(t, e.newStore)
	})
}

// The partitioned layout is for Postgres only, over uuid ids.
func TestPartitionedLayoutNeedsPostgres(t *testing.T) {
	t.Parallel()
	for _, e := range engines {
		if e.dialect == inboxsql.Postgres {
			continue
		}
		t.Run(e.name, func(t *testing.T) {
			db, tables := e.open(t)
			tables.Layout = inboxdriver.LayoutPartitioned
			_, err := inboxsql.New(db, engineOf(e.dialect), &inboxsql.Config{Tables: tables})
			require.ErrorContains(t, err, "Postgres only")
		})
	}
	_, err := inboxmigrate.Render(inboxdriver.DialectPostgres, inboxdriver.Tables{Layout: inboxdriver.LayoutPartitioned, IDType: inboxdriver.IDTypeText}, inboxmigrate.FormatPlain)
	require.ErrorContains(t, err, "IDType")
}
