package inboxadmin_test

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver testdb creates schemas with

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxadmin"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxmigrate"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/inboxsql"
	"github.com/txinbox/inbox/inboxsql/inboxsqlite"
	"github.com/txinbox/inbox/inboxtest"
	"github.com/txinbox/inbox/internal/testdb"
	"github.com/txinbox/inbox/outbox"
)

func TestMain(m *testing.M) { testdb.Main(m) }

var pools = testdb.Shared[*pgxpool.Pool]{Query: testdb.PgxPool}

// fixture is one store with an inbox client over it, whatever its
// transaction type: the tests run the same steps on each.
type fixture struct {
	name  string
	store inboxadmin.Store
	// handler builds the admin page with cfg.
	handler func(cfg *inboxadmin.Config) *inboxadmin.Handler
	// process applies msg for consumer: the handler records its id in the
	// applied table, in the inbox's transaction.
	process func(ctx context.Context, consumer string, msg inbox.Message) (inbox.Outcome, error)
	// replay replays consumer's dead letters marked for replay with the
	// same handler.
	replay func(ctx context.Context, consumer string) ([]inbox.ReplayResult, error)
	// applied counts the applied rows of a message id.
	applied    func(ctx context.Context, id string) int
	deadLetter func(ctx context.Context, p inbox.DeadLetterParams) error
	// stuckEffect leaves a step of consumer's message started, its outcome
	// unknown.
	stuckEffect func(ctx context.Context, consumer, id, step string) error
	// exec runs a statement on the store, with {inbox}, {inbox_effects}
	// and {outbox} standing for the tables' qualified names (Postgres only;
	// nil elsewhere).
	exec func(ctx context.Context, stmt string, args ...any) error
	// enqueue writes one event into the outbox.
	enqueue func(ctx context.Context, topic string, payload []byte) (string, error)
}

func newFixture[TTx any](t *testing.T, name string, c *inbox.Client[TTx], ob *outbox.Outbox[TTx],
	record func(ctx context.Context, tx TTx, id string) error, applied func(ctx context.Context, id string) int) *fixture {
	h := inbox.HandlerFunc[TTx](func(ctx context.Context, tx TTx, m inbox.Message) error {
		return record(ctx, tx, m.ID)
	})
	store, _ := inboxadmin.FromClient(c)
	return &fixture{
		name:  name,
		store: store,
		handler: func(cfg *inboxadmin.Config) *inboxadmin.Handler {
			ah, err := inboxadmin.New(c, cfg)
			require.NoError(t, err)
			return ah
		},
		process: func(ctx context.Context, consumer string, msg inbox.Message) (inbox.Outcome, error) {
			return c.Process(ctx, consumer, msg, h)
		},
		replay: func(ctx context.Context, consumer string) ([]inbox.ReplayResult, error) {
			return c.ProcessReplays(ctx, consumer, h)
		},
		applied:    applied,
		deadLetter: func(ctx context.Context, p inbox.DeadLetterParams) error { return c.DeadLetter(ctx, p) },
		stuckEffect: func(ctx context.Context, consumer, id, step string) error {
			_, err := c.Process(ctx, consumer, inbox.Message{ID: id}, inbox.HandlerFunc[TTx](func(ctx context.Context, tx TTx, m inbox.Message) error {
				_, err := c.Effect(ctx, m, step, func(ctx context.Context, key string) ([]byte, error) {
					return nil, errors.New("timeout: outcome unknown")
				}, nil)
				return inbox.Permanent(err)
			}))
			if err == nil {
				return errors.New("the effect's handler did not fail")
			}
			return nil
		},
		enqueue: func(ctx context.Context, topic string, payload []byte) (string, error) {
			ids, err := ob.Enqueue(ctx, outbox.Message{Topic: topic, Payload: payload})
			if err != nil {
				return "", err
			}
			return ids[0], nil
		},
	}
}

// postgres is a fixture on a fresh schema of the test server.
func postgres(t *testing.T) *fixture {
	t.Helper()
	pool := pools.Get(t, pgxpool.New, (*pgxpool.Pool).Close)
	schema := testdb.Schema(t)
	d, err := inboxpgx.New(pool, &inboxpgx.Config{Tables: inboxdriver.Tables{Schema: schema}})
	require.NoError(t, err)
	migrate(t, d)
	ctx := context.Background()
	table := pgx.Identifier{schema, "applied"}.Sanitize()
	_, err = pool.Exec(ctx, `CREATE TABLE `+table+` (id text NOT NULL)`)
	require.NoError(t, err)
	c, err := inbox.NewClient(d, nil)
	require.NoError(t, err)
	ob, err := outbox.New(d, nil)
	require.NoError(t, err)
	f := newFixture(t, "postgres", c, ob,
		func(ctx context.Context, tx pgx.Tx, id string) error {
			_, err := tx.Exec(ctx, `INSERT INTO `+table+` (id) VALUES ($1)`, id)
			return err
		},
		func(ctx context.Context, id string) int {
			var n int
			require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+table+` WHERE id = $1`, id).Scan(&n))
			return n
		})
	f.exec = func(ctx context.Context, stmt string, args ...any) error {
		for _, tb := range []string{"inbox", "inbox_effects", "outbox"} {
			stmt = strings.ReplaceAll(stmt, "{"+tb+"}", pgx.Identifier{schema, tb}.Sanitize())
		}
		_, err := pool.Exec(ctx, stmt, args...)
		return err
	}
	return f
}

// sqlite is a fixture on a new SQLite file.
func sqlite(t *testing.T) *fixture {
	t.Helper()
	dir := t.TempDir()
	db, err := inboxsqlite.Open(filepath.Join(dir, "inbox.db"))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	// The effects ledger commits on its own while the handler's
	// transaction holds the inbox file's write lock: it needs a file of
	// its own.
	edb, err := inboxsqlite.Open(filepath.Join(dir, "effects.db"))
	require.NoError(t, err)
	t.Cleanup(func() { edb.Close() })
	ledger, err := inboxsql.New(edb, inboxsqlite.Engine, nil)
	require.NoError(t, err)
	migrate(t, ledger)
	d, err := inboxsql.New(db, inboxsqlite.Engine, &inboxsql.Config{EffectsDB: edb})
	require.NoError(t, err)
	migrate(t, d)
	ctx := context.Background()
	_, err = db.ExecContext(ctx, `CREATE TABLE applied (id TEXT NOT NULL)`)
	require.NoError(t, err)
	c, err := inbox.NewClient(d, nil)
	require.NoError(t, err)
	ob, err := outbox.New(d, nil)
	require.NoError(t, err)
	return newFixture(t, "sqlite", c, ob,
		func(ctx context.Context, tx *sql.Tx, id string) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO applied (id) VALUES (?)`, id)
			return err
		},
		func(ctx context.Context, id string) int {
			var n int
			require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM applied WHERE id = ?`, id).Scan(&n))
			return n
		})
}

func migrate(t *testing.T, d inboxdriver.Admin) {
	t.Helper()
	m, err := inboxmigrate.New(d)
	require.NoError(t, err)
	_, err = m.Up(context.Background())
	require.NoError(t, err)
}

// fixtures are the stores every handler test runs on.
func fixtures(t *testing.T) []func(*testing.T) *fixture {
	return []func(*testing.T) *fixture{postgres, sqlite}
}

// seeded is what seed put in a fixture.
type seeded struct {
	applied   []string // ids billing applied
	dlID      string   // the message id of billing's replayable dead letter
	noIDCount int      // dead letters of billing without an id
	stuckID   string   // the message with a stuck effect, of shipping
	eventID   string   // an outbox event
}

// seed gives f two applied messages, two dead letters (one replayable),
// a stuck effect and an outbox event.
func seed(t *testing.T, f *fixture) seeded {
	t.Helper()
	ctx := context.Background()
	var s seeded
	for range 2 {
		id := inboxtest.NewID()
		out, err := f.process(ctx, "billing", inbox.Message{ID: id})
		require.NoError(t, err)
		require.Equal(t, inbox.Applied, out)
		s.applied = append(s.applied, id)
	}
	s.dlID = inboxtest.NewID()
	require.NoError(t, f.deadLetter(ctx, inbox.DeadLetterParams{Consumer: "billing",
		Message: inbox.Message{ID: s.dlID, Payload: []byte(`{"card":"4111-secret"}`), Headers: map[string]string{"authorization": "Bearer secret-token"},
			Source: inbox.Source{Transport: "kafka", Queue: "orders", Partition: 1, Offset: 7}},
		Err: inbox.Permanent(errors.New("card declined")), Attempts: 3}))
	require.NoError(t, f.deadLetter(ctx, inbox.DeadLetterParams{Consumer: "billing",
		Message: inbox.Message{Payload: []byte("no id here"), Source: inbox.Source{Transport: "sqs", Queue: "q", BrokerID: "m-1"}},
		Err:     inbox.ErrNoMessageID, Attempts: 1}))
	s.noIDCount = 1
	s.stuckID = inboxtest.NewID()
	require.NoError(t, f.stuckEffect(ctx, "shipping", s.stuckID, "label"))
	var err error
	s.eventID, err = f.enqueue(ctx, "orders", []byte(`{"order":1}`))
	require.NoError(t, err)
	return s
}

// allowAll is an Authorize that allows every request.
func allowAll(*http.Request, inboxadmin.Action) error { return nil }

// later is a clock an hour ahead, so that the seeded effect is stuck.
func later() time.Time { return time.Now().Add(time.Hour) }

func newID() string { return inboxtest.NewID() }
