package inboxpgx_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxmigrate"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/inboxtest"
	"github.com/txinbox/inbox/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// newDriver returns a driver over a fresh, migrated schema.
func newDriver(t testing.TB, tables inboxdriver.Tables) (*inboxpgx.Driver, string) {
	t.Helper()
	return newDriverOn(t, testPool(t), tables)
}

// newDriverOn returns a driver on pool over a fresh, migrated schema.
func newDriverOn(t testing.TB, pool *pgxpool.Pool, tables inboxdriver.Tables) (*inboxpgx.Driver, string) {
	t.Helper()
	tables.Schema = testdb.Schema(t)
	d, err := inboxpgx.New(pool, &inboxpgx.Config{Tables: tables})
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

// newStore is the pgx store for the conformance suite, with an effects
// table beside the inbox.
func newStore(t *testing.T) *inboxtest.Store[pgx.Tx] {
	d, schema := newDriver(t, inboxdriver.Tables{})
	return storeOver(t, d, schema)
}

// storeOver is the conformance suite's store over d, whose tables are in
// schema.
func storeOver(t *testing.T, d *inboxpgx.Driver, schema string) *inboxtest.Store[pgx.Tx] {
	pool := d.Pool()
	effects := pgx.Identifier{schema, "effects"}.Sanitize()
	if _, err := pool.Exec(context.Background(), `CREATE TABLE `+effects+` (consumer text NOT NULL, message_id text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return &inboxtest.Store[pgx.Tx]{
		Driver: d,
		Begin:  func(ctx context.Context) (pgx.Tx, error) { return pool.Begin(ctx) },
		Effect: func(ctx context.Context, tx pgx.Tx, consumer, id string) error {
			_, err := tx.Exec(ctx, `INSERT INTO `+effects+` (consumer, message_id) VALUES ($1, $2)`, consumer, id)
			return err
		},
		Effects: func(ctx context.Context, consumer, id string) (int, error) {
			var n int
			err := pool.QueryRow(ctx, `SELECT count(*) FROM `+effects+` WHERE consumer = $1 AND message_id = $2`, consumer, id).Scan(&n)
			return n, err
		},
		WaitingClaims: func(ctx context.Context) (int, error) { return waitingClaims(ctx, pool, schema) },
	}
}

// waitingClaims counts the claims into schema's tables that wait for a lock.
// The claim's INSERT need not start the query's text: in the
// simple_protocol exec mode a claim's batch (BEGIN, the lock timeout, the
// INSERT) is sent as one query.
func waitingClaims(ctx context.Context, pool *pgxpool.Pool, schema string) (int, error) {
	var n int
	err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
 WHERE wait_event_type = 'Lock' AND query LIKE '%INSERT INTO ' || $1 || '.%'`, pgx.Identifier{schema}.Sanitize()).Scan(&n)
	return n, err
}

// The conformance suite runs in each of pgx's query exec modes, as a pool
// configured with default_query_exec_mode in its URL has them: the default
// (cache_statement) in TestConformance/pgx, then the others one after
// another, each on a pool of its own (the modes' pools at once would take
// too many of the shared server's connections).
func TestConformance(t *testing.T) {
	t.Run("pgx", func(t *testing.T) {
		inboxtest.Exercise(t, newStore)
		inboxtest.ExerciseEffects(t, newStore)
	})
	for _, mode := range execModes[1:] {
		t.Run("pgx/"+mode, func(t *testing.T) {
			pool := modePool(t, mode)
			newStore := func(t *testing.T) *inboxtest.Store[pgx.Tx] {
				d, schema := newDriverOn(t, pool, inboxdriver.Tables{})
				return storeOver(t, d, schema)
			}
			inboxtest.Exercise(t, newStore)
			inboxtest.ExerciseEffects(t, newStore)
		})
	}
}

// TestConformanceThroughPgBouncer runs the conformance suite through
// PgBouncer, in transaction and in session pooling, with a pooler-safe
// exec mode (cache_describe).
func TestConformanceThroughPgBouncer(t *testing.T) {
	for _, mode := range []string{testdb.PoolTransaction, testdb.PoolSession} {
		t.Run(mode, func(t *testing.T) {
			pool := targetPool(t, mode, testdb.PgBouncerPoolSize)
			newStore := func(t *testing.T) *inboxtest.Store[pgx.Tx] {
				schema := testdb.Schema(t)
				d, err := inboxpgx.New(pool, &inboxpgx.Config{Tables: inboxdriver.Tables{Schema: schema}})
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
				return storeOver(t, d, schema)
			}
			inboxtest.Exercise(t, newStore)
			inboxtest.ExerciseEffects(t, newStore)
		})
	}
}
