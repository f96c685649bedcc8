package inboxpgx_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxmigrate"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/inboxtest"
	"github.com/txinbox/inbox/internal/testdb"
)

// partitionedTables are the tables of a partitioned inbox.
var partitionedTables = inboxdriver.Tables{Layout: inboxdriver.LayoutPartitioned}

// testSkew is the producers' clock skew the partitioned stores of the tests
// allow: short, so that the tests may keep a short retention.
const testSkew = time.Hour

// newPartitionedDriver returns a driver over a fresh schema migrated with
// the partitioned layout, whose partitions the migration made.
func newPartitionedDriver(t testing.TB) (*inboxpgx.Driver, string) {
	t.Helper()
	tables := partitionedTables
	tables.Schema = testdb.Schema(t)
	d, err := inboxpgx.New(testPool(t), &inboxpgx.Config{Tables: tables, Partitions: inboxdriver.PartitionConfig{MaxSkew: testSkew}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := inboxmigrate.New(d)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Up(context.Background()); err != nil {
		t.Fatal(err)
	}
	return d, tables.Schema
}

// newPartitionedStore is newStore over a partitioned inbox.
func newPartitionedStore(t *testing.T) *inboxtest.Store[pgx.Tx] {
	d, schema := newPartitionedDriver(t)
	return storeOver(t, d, schema)
}

func TestConformancePartitioned(t *testing.T) {
	t.Run("pgx", func(t *testing.T) {
		inboxtest.ExercisePartitioned(t, newPartitionedStore)
		inboxtest.ExerciseEffects(t, newPartitionedStore)
	})
}
