package inboxpgx_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxmigrate"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/inboxtest"
	"github.com/txinbox/inbox/inboxtransport"
	"github.com/txinbox/inbox/inboxtype"
	"github.com/txinbox/inbox/internal/pgcluster"
	"github.com/txinbox/inbox/internal/testdb"
)

// carried is a transport's delivery, for a Policy.
type carried struct{ d inboxtransport.Delivery }

func (x *carried) Delivery() *inboxtransport.Delivery { return &x.d }

// A commit that waits for a synchronous standby that is gone returns, after
// Config.CommitTimeout, as a store failure with an unknown outcome: not
// acked, not dead-lettered, retried. The driver closed its connection
// rather than cancel the wait, so the commit stayed invisible and its row
// locked: a redelivery while the standby is away times out on the lock
// (a cancelled wait would have made it a Duplicate, acked, that a failover
// would lose). Once the standby is back, the redelivery is a Duplicate and
// the effect happened once. The pool cancels with cancel requests, as a
// user may configure it, which the driver must not rely on.
func TestCommitTimeoutOnVanishedSyncStandby(t *testing.T) {
	t.Parallel()
	// The test's own deadline is the only bound on a commit that hangs.
	ctx := context.Background()
	if dl, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, dl.Add(-15*time.Second))
		defer cancel()
	}
	c, err := pgcluster.Start(ctx, &pgcluster.Config{Replica: true, Synchronous: true})
	testdb.Require(t, "a Postgres cluster of our own", err)
	t.Cleanup(c.Close)
	t.Cleanup(func() {
		if t.Failed() {
			var b strings.Builder
			c.Log(&b)
			t.Log(b.String())
		}
	})

	cfg, err := pgxpool.ParseConfig(c.Primary.URL())
	require.NoError(t, err)
	cfg.ConnConfig.BuildContextWatcherHandler = func(pg *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: pg, CancelRequestDelay: 0, DeadlineDelay: time.Minute}
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	const commitTimeout = 2 * time.Second
	d, err := inboxpgx.New(pool, &inboxpgx.Config{CommitTimeout: commitTimeout})
	require.NoError(t, err)
	m, err := inboxmigrate.New(d)
	require.NoError(t, err)
	_, err = m.Up(ctx)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `CREATE TABLE applied (message_id text NOT NULL)`)
	require.NoError(t, err)
	client := newClient(t, d, &inbox.Config{LockTimeout: time.Second})

	insert := func(ctx context.Context, tx pgx.Tx, m inbox.Message) error {
		_, err := tx.Exec(ctx, `INSERT INTO applied (message_id) VALUES ($1)`, m.ID)
		return err
	}
	handlers := map[string]inbox.Handler[pgx.Tx]{
		"plain": inbox.HandlerFunc[pgx.Tx](insert),
		"pipelined": inboxpgx.PipelineFunc(func(ctx context.Context, m inbox.Message, b *pgx.Batch) error {
			b.Queue(`INSERT INTO applied (message_id) VALUES ($1)`, m.ID)
			return nil
		}),
	}
	for _, name := range []string{"plain", "pipelined"} {
		t.Run(name, func(t *testing.T) {
			policy, err := inboxtransport.NewPolicy(inboxtransport.Config[pgx.Tx, *carried]{
				Client:        client,
				Handler:       handlers[name],
				Consumer:      "billing-" + name,
				Key:           inbox.HeaderKey("id"),
				MaxDeliveries: 1, // a failure of the message's own would dead-letter it at once
			})
			require.NoError(t, err)
			id := inboxtest.NewID()
			deliver := func() inboxtransport.Settlement {
				msg := inbox.Message{Headers: map[string]string{"id": id}, Source: inbox.Source{Transport: "test"}}
				return policy.Process(ctx, []*carried{{d: inboxtransport.Delivery{Message: msg}}}, false)[0]
			}

			c.CutReplication()
			s := deliver()
			require.Equal(t, inboxtransport.Retry, s.Verdict, "the commit's outcome is unknown: %v", s.Err)
			require.False(t, s.Attempted, "a store failure is not an attempt")
			require.Equal(t, inbox.FaultStore, s.Fault)
			require.ErrorIs(t, s.Err, inboxpgx.ErrCommitTimeout)
			require.ErrorIs(t, s.Err, inbox.ErrUnavailable)
			require.True(t, inbox.IsRetryable(s.Err))
			require.False(t, inbox.IsPermanent(s.Err))
			var se *inbox.StageError
			require.ErrorAs(t, s.Err, &se)
			require.Equal(t, inbox.StageCommit, se.Stage)
			require.Contains(t, s.Err.Error(), "commit outcome unknown")
			require.Contains(t, s.Err.Error(), "synchronous standby")

			// The primary still waits in the commit, its row locked and
			// invisible: the redelivery times out on the lock.
			s = deliver()
			require.Equal(t, inboxtransport.Retry, s.Verdict, "while the standby is away: %v", s.Err)
			require.ErrorIs(t, s.Err, inbox.ErrLockTimeout)
			require.False(t, s.Attempted)
			var n int
			require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM applied WHERE message_id = $1`, id).Scan(&n))
			require.Equal(t, 0, n, "the commit is not visible before the standby confirms it")

			require.NoError(t, c.RestoreReplication(ctx))
			// The standby confirms the commit once it has caught up: until
			// then a redelivery still times out on the lock.
			for i := 0; ; i++ {
				s = deliver()
				if !errors.Is(s.Err, inbox.ErrLockTimeout) || i == 60 {
					break
				}
			}
			require.NoError(t, s.Err)
			require.Equal(t, inboxtransport.Ack, s.Verdict)
			require.Equal(t, inbox.Duplicate, s.Outcome)
			require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM applied WHERE message_id = $1`, id).Scan(&n))
			require.Equal(t, 1, n, "the effect happened once")
			require.NoError(t, c.CatchUp(ctx))
			out, err := c.Query(ctx, c.Replica, `SELECT count(*) FROM applied WHERE message_id = '`+id+`'`)
			require.NoError(t, err)
			require.Equal(t, "1", out, "the standby has it: a failover keeps it")
			dls, err := client.Admin().DeadLetterList(ctx, inboxtype.DeadLetterListParams{Consumer: "billing-" + name})
			require.NoError(t, err)
			require.Len(t, dls, 0)
		})
	}
}
