package inboxsql_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxsql"
	"github.com/txinbox/inbox/inboxtest"
	"github.com/txinbox/inbox/inboxtype"
)

// provider is a remote call that counts its calls.
type provider struct{ calls atomic.Int32 }

func (p *provider) call(ctx context.Context, key string) ([]byte, error) {
	n := p.calls.Add(1)
	return fmt.Appendf(nil, "result-%d", n), nil
}

func message(id string) inbox.Message { return inbox.Message{ID: id, Payload: []byte("{}")} }

// On SQLite the handler's transaction holds the file's write lock until it
// ends, so a ledger in the same file cannot be written from the handler:
// the write would wait for the busy timeout (and, with a pool of one
// connection, for a connection, forever). It fails at once with
// ErrLedgerLocked instead, calls nothing, and the message is not applied.
// Outside any message transaction the same ledger works.
func TestSQLiteLedgerInInboxFileFailsFastInHandler(t *testing.T) {
	for _, pool := range []int{0, 1} {
		for _, lockTimeout := range []time.Duration{0, time.Minute} {
			t.Run(fmt.Sprintf("pool=%d/lockTimeout=%v", pool, lockTimeout), func(t *testing.T) {
				t.Parallel()
				d, _ := engineNamed(t, "sqlite").newDriver(t)
				d.DB().SetMaxOpenConns(pool)
				c, err := inbox.NewClient(d, &inbox.Config{LockTimeout: lockTimeout})
				require.NoError(t, err)
				// A bound that a hang would reach, so that it fails the test
				// with the wrong error instead of hanging it.
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				p := &provider{}
				h := inbox.HandlerFunc[*sql.Tx](func(ctx context.Context, tx *sql.Tx, m inbox.Message) error {
					_, err := c.Effect(ctx, m, "capture", p.call, nil)
					return err
				})

				id := inboxtest.NewID()
				_, err = c.Process(ctx, "billing", message(id), h)
				require.ErrorIs(t, err, inboxsql.ErrLedgerLocked)
				require.NotErrorIs(t, err, inbox.ErrConflict, "a locked ledger is not a conflict to retry at once")
				require.True(t, inbox.IsRetryable(err), "it is not the message's fault: %v", err)
				require.NoError(t, ctx.Err())

				ids := []string{inboxtest.NewID(), inboxtest.NewID()}
				rs, err := c.ProcessBatch(ctx, "billing", []inbox.Message{message(ids[0]), message(ids[1])}, h)
				require.NoError(t, err)
				for _, r := range rs {
					require.ErrorIs(t, r.Err, inboxsql.ErrLedgerLocked)
				}
				require.NoError(t, ctx.Err())

				require.Zero(t, p.calls.Load(), "the provider was called")
				es, err := c.Admin().EffectList(ctx, inboxtype.EffectListParams{})
				require.NoError(t, err)
				require.Empty(t, es)
				st, err := c.Admin().Stats(ctx)
				require.NoError(t, err)
				require.Empty(t, st.Consumers, "a message was applied")

				// With no message transaction open, the ledger in the same
				// file works: record the call first, then process.
				res, err := c.Effect(inbox.WithConsumer(ctx, "billing"), message(id), "capture", p.call, nil)
				require.NoError(t, err)
				require.Equal(t, "result-1", string(res))
				inboxtest.RequireApplied(t)(c.Process(ctx, "billing", message(id), inbox.HandlerFunc[*sql.Tx](
					func(ctx context.Context, tx *sql.Tx, m inbox.Message) error { return nil })))
			})
		}
	}
}

// With the caller's own transaction (ClaimTx), the Driver cannot know
// that the write lock is the caller's: the ledger write waits for it until
// the busy timeout and fails with an error that says why; with a pool of
// one connection, which the caller's transaction holds, it fails with
// ErrLedgerLocked once no connection has freed up for
// DefaultSQLiteBusyTimeout.
func TestSQLiteLedgerInInboxFileClaimTx(t *testing.T) {
	t.Run("busy", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "inbox.db")
		// A short busy timeout, so that the test does not wait long.
		db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(50)&_pragma=journal_mode(WAL)&_txlock=immediate")
		require.NoError(t, err)
		t.Cleanup(func() { db.Close() })
		migrate(t, db, inboxsql.SQLite, inboxdriver.Tables{})
		d, err := inboxsql.New(db, engineOf(inboxsql.SQLite), nil)
		require.NoError(t, err)
		c, err := inbox.NewClient(d, nil)
		require.NoError(t, err)
		ctx := context.Background()
		p := &provider{}
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		defer tx.Rollback()
		id := inboxtest.NewID()
		inboxtest.RequireApplied(t)(c.ClaimTx(ctx, tx, "billing", message(id)))
		_, err = c.Effect(inbox.WithConsumer(ctx, "billing"), message(id), "capture", p.call, nil)
		require.ErrorIs(t, err, inbox.ErrConflict)
		require.ErrorContains(t, err, "Config.EffectsDB")
		require.Zero(t, p.calls.Load())
	})
	t.Run("pool=1", func(t *testing.T) {
		t.Parallel()
		d, _ := engineNamed(t, "sqlite").newDriver(t)
		d.DB().SetMaxOpenConns(1)
		c, err := inbox.NewClient(d, nil)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		p := &provider{}
		tx, err := d.DB().BeginTx(ctx, nil)
		require.NoError(t, err)
		defer tx.Rollback()
		id := inboxtest.NewID()
		inboxtest.RequireApplied(t)(c.ClaimTx(ctx, tx, "billing", message(id)))
		_, err = c.Effect(inbox.WithConsumer(ctx, "billing"), message(id), "capture", p.call, nil)
		require.ErrorIs(t, err, inboxsql.ErrLedgerLocked)
		require.NoError(t, ctx.Err())
		require.Zero(t, p.calls.Load())
	})
}

// With the ledger in a file of its own, Effect runs inside a handler even
// when the inbox's pool has a single connection, which the handler's
// transaction holds.
func TestSQLiteEffectsDBInHandler(t *testing.T) {
	t.Parallel()
	d, _ := engineNamed(t, "sqlite-effectsdb").newDriver(t)
	d.DB().SetMaxOpenConns(1)
	c, err := inbox.NewClient(d, &inbox.Config{LockTimeout: time.Minute})
	require.NoError(t, err)
	ctx := context.Background()
	p := &provider{}
	h := inbox.HandlerFunc[*sql.Tx](func(ctx context.Context, tx *sql.Tx, m inbox.Message) error {
		_, err := c.Effect(ctx, m, "capture", p.call, &inbox.EffectOpts{NonIdempotent: true})
		return err
	})
	id := inboxtest.NewID()
	inboxtest.RequireApplied(t)(c.Process(ctx, "billing", message(id), h))
	inboxtest.RequireDuplicate(t)(c.Process(ctx, "billing", message(id), h))
	require.Equal(t, int32(1), p.calls.Load())
	es, err := c.Admin().EffectList(ctx, inboxtype.EffectListParams{MessageID: id})
	require.NoError(t, err)
	require.Len(t, es, 1)
	require.Equal(t, inboxtype.EffectDone, es[0].State)

	// The entry is in the ledger's file, not in the inbox's.
	count := func(db *sql.DB) int {
		var n int
		require.NoError(t, db.QueryRow(`SELECT count(*) FROM "inbox_effects"`).Scan(&n))
		return n
	}
	require.Equal(t, 1, count(d.EffectsDB()))
	require.Equal(t, 0, count(d.DB()))
}

// Purge deletes the ledger entries of the messages it purges, and Forget
// those of the message it forgets, on every engine, including SQLite with
// the ledger in the inbox's file, where the entries are written outside
// any handler: the call is recorded first, then the message is processed.
func TestEffectsPurgeAndForget(t *testing.T) {
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			d, _ := e.newDriver(t)
			c, err := inbox.NewClient(d, &inbox.Config{ReplayHorizon: time.Hour})
			require.NoError(t, err)
			ctx := context.Background()
			bctx := inbox.WithConsumer(ctx, "billing")
			p := &provider{}
			noop := inbox.HandlerFunc[*sql.Tx](func(ctx context.Context, tx *sql.Tx, m inbox.Message) error { return nil })
			apply := func(id string) {
				for _, step := range []string{"capture", "notify"} {
					_, err := c.Effect(bctx, message(id), step, p.call, nil)
					require.NoError(t, err)
				}
				inboxtest.RequireApplied(t)(c.Process(ctx, "billing", message(id), noop))
			}
			entries := func(id string) int {
				es, err := c.Admin().EffectList(ctx, inboxtype.EffectListParams{MessageID: id})
				require.NoError(t, err)
				return len(es)
			}

			oldIDs := []string{inboxtest.NewID(), inboxtest.NewID(), inboxtest.NewID()}
			for _, id := range oldIDs {
				apply(id)
			}
			require.NoError(t, inboxtest.AgeRows(ctx, d, "billing", oldIDs, 48*time.Hour))
			orphan := inboxtest.NewID() // a call recorded, its message never applied
			_, err = c.Effect(bctx, message(orphan), "capture", p.call, nil)
			require.NoError(t, err)
			fresh := inboxtest.NewID()
			apply(fresh)

			n, err := c.Admin().Purge(ctx, inbox.PurgeParams{OlderThan: 24 * time.Hour, BatchSize: 2})
			require.NoError(t, err)
			require.Equal(t, int64(3), n)
			for _, id := range oldIDs {
				require.Zero(t, entries(id), "entries of a purged message")
			}
			require.Equal(t, 2, entries(fresh))
			require.Equal(t, 1, entries(orphan))
			inboxtest.RequireApplied(t)(c.Process(ctx, "billing", message(oldIDs[0]), noop))

			require.NoError(t, c.Admin().Forget(ctx, "billing", fresh))
			require.Zero(t, entries(fresh))
			require.NoError(t, c.Admin().Forget(ctx, "billing", orphan), "a message with only ledger entries")
			require.Zero(t, entries(orphan))
			require.ErrorIs(t, c.Admin().Forget(ctx, "billing", orphan), inbox.ErrNotFound)
			inboxtest.RequireApplied(t)(c.Process(ctx, "billing", message(fresh), noop))
		})
	}
}

func TestEffectsDBConfig(t *testing.T) {
	t.Parallel()
	db := sqliteDB(t)
	other := sqliteDB(t)
	d, err := inboxsql.New(db, engineOf(inboxsql.SQLite), nil)
	require.NoError(t, err)
	require.Same(t, db, d.EffectsDB())
	d, err = inboxsql.New(db, engineOf(inboxsql.SQLite), &inboxsql.Config{EffectsDB: other})
	require.NoError(t, err)
	require.Same(t, other, d.EffectsDB())

	_, err = inboxsql.New(db, engineOf(inboxsql.SQLite), &inboxsql.Config{EffectsDB: db})
	require.ErrorContains(t, err, "Config.EffectsDB")
	for _, dialect := range []inboxsql.Dialect{inboxsql.Postgres, inboxsql.MySQL, inboxsql.MariaDB} {
		_, err = inboxsql.New(db, engineOf(dialect), &inboxsql.Config{EffectsDB: other})
		require.ErrorContains(t, err, "Config.EffectsDB", "%s", dialect)
	}
}

// A purge batch larger than one DELETE's share of keys deletes every row
// of the batch and every ledger entry of its messages.
func TestEffectsPurgeLargeBatch(t *testing.T) {
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			d, _ := e.newDriver(t)
			ctx := context.Background()
			old := time.Now().Add(-48 * time.Hour).UTC().Truncate(time.Microsecond)
			ids := make([]string, 450)
			for i := range ids {
				ids[i] = inboxtest.NewID()
			}
			tx, claimed, err := d.BeginClaim(ctx, &inboxdriver.ClaimParams{Consumer: "billing", IDs: ids})
			require.NoError(t, err)
			require.NotContains(t, claimed, false)
			require.NoError(t, d.Commit(ctx, tx))
			require.NoError(t, inboxtest.AgeRows(ctx, d, "billing", ids, 48*time.Hour))
			for _, id := range ids {
				_, started, err := d.EffectBegin(ctx, &inboxdriver.EffectBeginParams{
					EffectKeyParams: inboxdriver.EffectKeyParams{Consumer: "billing", ID: id, Step: "capture"}, Now: old})
				require.NoError(t, err)
				require.True(t, started)
			}
			n, err := d.PurgeBatch(ctx, &inboxdriver.PurgeParams{OlderThan: 47 * time.Hour, Consumer: "billing", Limit: 1000})
			require.NoError(t, err)
			require.Equal(t, int64(len(ids)), n)
			es, err := d.EffectList(ctx, &inboxtype.EffectListParams{Limit: 1000})
			require.NoError(t, err)
			require.Empty(t, es)
			st, err := d.Stats(ctx)
			require.NoError(t, err)
			require.Empty(t, st.Consumers)
		})
	}
}
