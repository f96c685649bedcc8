package inboxwatermill_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver testdb creates schemas with

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxmigrate"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/inboxsql"
	"github.com/txinbox/inbox/inboxsql/inboxsqlite"
	"github.com/txinbox/inbox/internal/testdb"
	"github.com/txinbox/inbox/outbox"
)

func TestMain(m *testing.M) { testdb.Main(m) }

var pools = testdb.Shared[*pgxpool.Pool]{Query: testdb.PgxPool}

// store is an inbox, an outbox and an effects table on one database, with
// the two operations the tests need in the store's transaction type.
type store[TTx any] struct {
	client *inbox.Client[TTx]
	outbox *outbox.Outbox[TTx]
	// effect records one application of the event id in tx.
	effect func(ctx context.Context, tx TTx, id string) error
	// effects counts the applications of each event id.
	effects func(t *testing.T) map[string]int
}

func migrate(t *testing.T, d inboxdriver.Admin) {
	t.Helper()
	m, err := inboxmigrate.New(d)
	require.NoError(t, err)
	_, err = m.Up(context.Background())
	require.NoError(t, err)
}

// sqliteStore is a store on a SQLite file of t's own.
func sqliteStore(t *testing.T) *store[*sql.Tx] {
	t.Helper()
	db, err := inboxsqlite.Open(filepath.Join(t.TempDir(), "inbox.db"))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	d, err := inboxsql.New(db, inboxsqlite.Engine, nil)
	require.NoError(t, err)
	migrate(t, d)
	_, err = db.Exec(`CREATE TABLE effects (event_id TEXT NOT NULL)`)
	require.NoError(t, err)
	client, err := inbox.NewClient(d, nil)
	require.NoError(t, err)
	ob, err := outbox.New(d, nil)
	require.NoError(t, err)
	return &store[*sql.Tx]{
		client: client,
		outbox: ob,
		effect: func(ctx context.Context, tx *sql.Tx, id string) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO effects (event_id) VALUES (?)`, id)
			return err
		},
		effects: func(t *testing.T) map[string]int {
			return countEffects(t, func() (*sql.Rows, error) {
				return db.Query(`SELECT event_id, count(*) FROM effects GROUP BY event_id`)
			})
		},
	}
}

func countEffects(t *testing.T, query func() (*sql.Rows, error)) map[string]int {
	t.Helper()
	rows, err := query()
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		require.NoError(t, rows.Scan(&id, &n))
		out[id] = n
	}
	require.NoError(t, rows.Err())
	return out
}

// pgStore is a store on the test Postgres, in a random schema.
func pgStore(t *testing.T) *store[pgx.Tx] {
	t.Helper()
	pool := pools.Get(t, pgxpool.New, (*pgxpool.Pool).Close)
	schema := testdb.Schema(t)
	d, err := inboxpgx.New(pool, &inboxpgx.Config{Tables: inboxdriver.Tables{Schema: schema}})
	require.NoError(t, err)
	migrate(t, d)
	table := pgx.Identifier{schema, "effects"}.Sanitize()
	ctx := context.Background()
	_, err = pool.Exec(ctx, `CREATE TABLE `+table+` (event_id text NOT NULL)`)
	require.NoError(t, err)
	client, err := inbox.NewClient(d, nil)
	require.NoError(t, err)
	ob, err := outbox.New(d, nil)
	require.NoError(t, err)
	return &store[pgx.Tx]{
		client: client,
		outbox: ob,
		effect: func(ctx context.Context, tx pgx.Tx, id string) error {
			_, err := tx.Exec(ctx, `INSERT INTO `+table+` (event_id) VALUES ($1)`, id)
			return err
		},
		effects: func(t *testing.T) map[string]int {
			rows, err := pool.Query(ctx, `SELECT event_id, count(*) FROM `+table+` GROUP BY event_id`)
			require.NoError(t, err)
			out := map[string]int{}
			for rows.Next() {
				var id string
				var n int
				require.NoError(t, rows.Scan(&id, &n))
				out[id] = n
			}
			require.NoError(t, rows.Err())
			return out
		},
	}
}

// onBothStores runs test on SQLite and on Postgres, in parallel.
func onBothStores(t *testing.T, sqlite func(t *testing.T, s *store[*sql.Tx]), postgres func(t *testing.T, s *store[pgx.Tx])) {
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		sqlite(t, sqliteStore(t))
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		postgres(t, pgStore(t))
	})
}

// newPubSub is a Go channel pub/sub whose Publish returns once every
// subscriber acked: a test that publishes knows its messages were handled.
// A nacked message is sent again until it is acked.
func newPubSub(t *testing.T) *gochannel.GoChannel {
	ps := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
	t.Cleanup(func() { ps.Close() })
	return ps
}

// runRouter starts r and waits until its handlers subscribed.
func runRouter(t *testing.T, r *message.Router) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	select {
	case <-r.Running():
	case err := <-done:
		t.Fatalf("router stopped: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("router did not start in 30s")
	}
}

func newRouter(t *testing.T) *message.Router {
	t.Helper()
	r, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	require.NoError(t, err)
	return r
}

// collector subscribes to a topic and keeps what arrives, acking it.
type collector struct {
	mu   sync.Mutex
	msgs []*message.Message
}

func collect(t *testing.T, sub message.Subscriber, topic string) *collector {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ch, err := sub.Subscribe(ctx, topic)
	require.NoError(t, err)
	c := &collector{}
	go func() {
		for m := range ch {
			c.mu.Lock()
			c.msgs = append(c.msgs, m)
			c.mu.Unlock()
			m.Ack()
		}
	}()
	return c
}

func (c *collector) all() []*message.Message {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*message.Message(nil), c.msgs...)
}

// eventually polls cond until it holds, failing t after 30 seconds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func ids(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = watermill.NewUUID()
	}
	return out
}

func publish(t *testing.T, pub message.Publisher, topic string, ids []string) {
	t.Helper()
	for i, id := range ids {
		require.NoError(t, pub.Publish(topic, message.NewMessage(id, fmt.Appendf(nil, `{"n":%d}`, i))))
	}
}
