// Package inboxpgxtest is the pgx store as the transport adapters' tests
// use it: the store of a transporttest.Transport (Transport, Client,
// Exec), and, for an adapter's own tests, the shared pool of the test
// binary, a store of its own per test and its effects table. Every
// adapter's test builds its harness with the same store.
package inboxpgxtest

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver internal/testdb creates schemas with

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxmigrate"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/inboxtransport/transporttest"
	"github.com/txinbox/inbox/internal/testdb"
)

// maxConns bounds each client's pool: a suite's cases run in parallel,
// each with a client of its own.
const maxConns = 4

// Client returns an inbox client over a pgx pool of its own on the
// database at url, with tables and config, and a function that closes the
// pool.
func Client(ctx context.Context, url string, tables inboxdriver.Tables, config *inbox.Config) (*inbox.Client[pgx.Tx], func(), error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, nil, err
	}
	pc.MaxConns = min(pc.MaxConns, maxConns)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, nil, err
	}
	d, err := inboxpgx.New(pool, &inboxpgx.Config{Tables: tables})
	if err == nil {
		var c *inbox.Client[pgx.Tx]
		if c, err = inbox.NewClient[pgx.Tx](d, config); err == nil {
			return c, pool.Close, nil
		}
	}
	pool.Close()
	return nil, nil, err
}

// Transport returns the transporttest.Transport of a broker whose harness
// makes queues with newQueue and opens them in a child process with
// openQueue, over the pgx store.
func Transport(name string, features transporttest.Features, newQueue func(testing.TB, transporttest.QueueOptions) transporttest.Queue[pgx.Tx], openQueue func(string) (transporttest.Queue[pgx.Tx], error)) transporttest.Transport[pgx.Tx] {
	return transporttest.Transport[pgx.Tx]{Name: name, Features: features, NewQueue: newQueue, OpenQueue: openQueue, Client: Client, Exec: Exec}
}

// Exec runs query with args on tx.
func Exec(ctx context.Context, tx pgx.Tx, query string, args ...any) error {
	_, err := tx.Exec(ctx, query, args...)
	return err
}

var pools = testdb.Shared[*pgxpool.Pool]{Query: testdb.PgxPool}

// Pool returns the pgx pool on the test server (internal/testdb) that the
// tests of one binary share, closed when they end.
func Pool(t testing.TB) *pgxpool.Pool { return pools.Get(t, pgxpool.New, (*pgxpool.Pool).Close) }

// Store is a test's store: a schema of its own on the shared pool, with
// the inbox's tables migrated, an inbox client over them, and an effects
// table.
type Store struct {
	Pool    *pgxpool.Pool
	Schema  string
	Client  *inbox.Client[pgx.Tx]
	Effects *Effects
}

// NewStore makes a test's store, dropped when t ends.
func NewStore(t testing.TB) *Store {
	t.Helper()
	pool := Pool(t)
	schema := testdb.Schema(t)
	d, err := inboxpgx.New(pool, &inboxpgx.Config{Tables: inboxdriver.Tables{Schema: schema}})
	require.NoError(t, err)
	m, err := inboxmigrate.New(d)
	require.NoError(t, err)
	_, err = m.Up(context.Background())
	require.NoError(t, err)
	client, err := inbox.NewClient[pgx.Tx](d, nil)
	require.NoError(t, err)
	table := pgx.Identifier{schema, "effects"}.Sanitize()
	_, err = pool.Exec(context.Background(), `CREATE TABLE `+table+` (
  seq      bigserial PRIMARY KEY,
  event_id uuid NOT NULL,
  grp      text NOT NULL DEFAULT '',
  n        int  NOT NULL DEFAULT 0
)`)
	require.NoError(t, err)
	return &Store{Pool: pool, Schema: schema, Client: client, Effects: &Effects{pool: pool, Table: table}}
}

// Effects is a test's effects table: a handler records each application
// of an event in it, in the event's transaction, and the test counts them.
type Effects struct {
	pool *pgxpool.Pool
	// Table is the table's name, quoted and qualified.
	Table string
}

// Apply records one application of the event id, with n and group, in tx.
func (e *Effects) Apply(ctx context.Context, tx pgx.Tx, id string, n int, group string) error {
	_, err := tx.Exec(ctx, `INSERT INTO `+e.Table+` (event_id, grp, n) VALUES ($1, $2, $3)`, id, group, n)
	return err
}

// Count is how many times the event id was applied.
func (e *Effects) Count(t testing.TB, id string) int {
	t.Helper()
	var n int
	err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM `+e.Table+` WHERE event_id = $1`, id).Scan(&n)
	require.NoError(t, err)
	return n
}

// Order is the n of every application of group's events ("" for all), in
// the order they committed.
func (e *Effects) Order(t testing.TB, group string) []int {
	t.Helper()
	rows, err := e.pool.Query(context.Background(), `SELECT n FROM `+e.Table+` WHERE $1 = '' OR grp = $1 ORDER BY seq`, group)
	require.NoError(t, err)
	order, err := pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(t, err)
	return order
}

// Event is the JSON body of an adapter's own test messages.
type Event struct {
	EventID string `json:"event_id,omitempty"`
	Group   string `json:"group,omitempty"`
	N       int    `json:"n"`
	Poison  string `json:"poison,omitempty"`
}

// Body returns e as JSON.
func (e Event) Body() string {
	b, err := json.Marshal(e)
	if err != nil {
		panic(err) // an Event always marshals
	}
	return string(b)
}

// ApplyEvent decodes msg's Event and records one application of it in tx.
// A body that is not an Event is a permanent failure.
func (e *Effects) ApplyEvent(ctx context.Context, tx pgx.Tx, msg inbox.Message) (Event, error) {
	var ev Event
	if err := json.Unmarshal(msg.Payload, &ev); err != nil {
		return ev, inbox.Permanent(err)
	}
	return ev, e.Apply(ctx, tx, msg.ID, ev.N, ev.Group)
}

// Handler is a handler that applies each event (ApplyEvent), then fails as
// its Poison says: "permanent" with an inbox.Permanent error, "retryable"
// with a plain one, every time. It counts its calls in calls.
func (e *Effects) Handler(calls *atomic.Int32) inbox.Handler[pgx.Tx] {
	return inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
		calls.Add(1)
		ev, err := e.ApplyEvent(ctx, tx, msg)
		switch {
		case err != nil:
			return err
		case ev.Poison == "permanent":
			return inbox.Permanent(errors.New("the amount is negative"))
		case ev.Poison == "retryable":
			return errors.New("downstream says no")
		}
		return nil
	})
}
