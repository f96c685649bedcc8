package inboxpgx_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/inboxtest"
	"github.com/txinbox/inbox/internal/testdb"
)

// showLockTimeout is a handler that records the lock_timeout its
// transaction runs under.
func showLockTimeout(got *[]string) inbox.Handler[pgx.Tx] {
	return inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
		var v string
		if err := tx.QueryRow(ctx, `SHOW lock_timeout`).Scan(&v); err != nil {
			return err
		}
		*got = append(*got, v)
		return nil
	})
}

// TestLockTimeoutBoundsOnlyTheClaim checks that the claim's lock timeout
// does not leak into the handler's statements, whether the session has its
// own lock_timeout or not, for single messages and batches.
func TestLockTimeoutBoundsOnlyTheClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, schema := newDriver(t, inboxdriver.Tables{})
	// A pool whose sessions run with their own lock_timeout.
	own := ownPool(t, 2, func(cfg *pgxpool.Config) { cfg.ConnConfig.RuntimeParams["lock_timeout"] = "777ms" })
	od, err := inboxpgx.New(own, &inboxpgx.Config{Tables: inboxdriver.Tables{Schema: schema}})
	require.NoError(t, err)

	for _, tc := range []struct {
		name   string
		driver *inboxpgx.Driver
		want   string
	}{{"ServerDefault", d, "0"}, {"SessionSetting", od, "777ms"}} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := inbox.NewClient(tc.driver, &inbox.Config{LockTimeout: 3 * time.Second})
			require.NoError(t, err)
			var got []string
			h := showLockTimeout(&got)
			inboxtest.RequireApplied(t)(c.Process(ctx, "billing", inbox.Message{ID: inboxtest.NewID()}, h))
			res, err := c.ProcessBatch(ctx, "billing", []inbox.Message{{ID: inboxtest.NewID()}, {ID: inboxtest.NewID()}}, h)
			require.NoError(t, err)
			for _, r := range res {
				require.NoError(t, r.Err)
				require.Equal(t, inbox.Applied, r.Outcome)
			}
			require.Equal(t, []string{tc.want, tc.want, tc.want}, got)
		})
	}
}

// TestClaimTxRestoresCallersLockTimeout checks that a claim in the
// caller's transaction leaves the caller's own lock_timeout in place, on
// the applied path and on the duplicate path.
func TestClaimTxRestoresCallersLockTimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, _ := newDriver(t, inboxdriver.Tables{})
	c, err := inbox.NewClient(d, &inbox.Config{LockTimeout: 2 * time.Second})
	require.NoError(t, err)
	id := inboxtest.NewID()
	for _, want := range []inbox.Outcome{inbox.Applied, inbox.Duplicate} {
		tx, err := d.Pool().Begin(ctx)
		require.NoError(t, err)
		// Roll back even when an assertion fails, or the open transaction
		// would hold up the schema's drop.
		t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
		_, err = tx.Exec(ctx, `SET LOCAL lock_timeout = '1234ms'`)
		require.NoError(t, err)
		out, err := c.ClaimTx(ctx, tx, "billing", inbox.Message{ID: id})
		require.NoError(t, err)
		require.Equal(t, want, out)
		var v string
		require.NoError(t, tx.QueryRow(ctx, `SHOW lock_timeout`).Scan(&v))
		require.Equal(t, "1234ms", v)
		require.NoError(t, tx.Commit(ctx))
	}
}

// TestBatchClaimLockTimeout checks that a batch whose claim waits behind an
// in-flight delivery of one of its ids gives up after the lock timeout with
// a retryable error for every message, and applies none.
func TestBatchClaimLockTimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, _ := newDriver(t, inboxdriver.Tables{})
	held := inboxtest.NewID()
	tx, claimed, err := d.BeginClaim(ctx, &inboxdriver.ClaimParams{Consumer: "billing", IDs: []string{held}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Rollback(context.Background(), tx) })
	require.True(t, claimed[0])

	c, err := inbox.NewClient(d, &inbox.Config{LockTimeout: 50 * time.Millisecond, MaxConflictRetries: -1})
	require.NoError(t, err)
	var calls []string
	other := inboxtest.NewID()
	res, err := c.ProcessBatch(ctx, "billing", []inbox.Message{{ID: other}, {ID: held}}, showLockTimeout(&calls))
	require.NoError(t, err)
	require.Len(t, res, 2)
	for _, r := range res {
		require.ErrorIs(t, r.Err, inbox.ErrLockTimeout)
		require.True(t, inbox.IsRetryable(r.Err))
	}
	require.Empty(t, calls)
	found, err := d.Forget(ctx, &inboxdriver.ForgetParams{Consumer: "billing", ID: other})
	require.NoError(t, err)
	require.False(t, found, "the batch's other id must not have been claimed")
}

// TestLockTimeoutOnAFreshConnection: a claim on a connection that has not
// prepared it yet, behind a table lock, fails with ErrLockTimeout while the
// lock is still held. pgx prepares a statement before the batch that bounds
// its lock wait runs, and preparing the claim needs a lock on the inbox:
// unbounded, the claim waited for the whole table lock.
func TestLockTimeoutOnAFreshConnection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, schema := newDriver(t, inboxdriver.Tables{})
	inboxTable := pgx.Identifier{schema, "inbox"}.Sanitize()

	// The holder takes the table lock and keeps it until the end of the
	// test. If a claim waited for it, the holder gives up after a minute,
	// so that the test fails rather than hangs.
	holder, err := d.Pool().Begin(ctx)
	require.NoError(t, err)
	release := time.AfterFunc(time.Minute, func() { _ = holder.Rollback(context.Background()) })
	t.Cleanup(func() {
		release.Stop()
		_ = holder.Rollback(context.Background())
	})
	_, err = holder.Exec(ctx, `LOCK TABLE `+inboxTable+` IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)

	noop := inbox.HandlerFunc[pgx.Tx](func(context.Context, pgx.Tx, inbox.Message) error { return nil })
	pipelined := inboxpgx.PipelineFunc(func(context.Context, inbox.Message, *pgx.Batch) error { return nil })
	for _, tc := range []struct {
		name string
		run  func(c *inbox.Client[pgx.Tx], pool *pgxpool.Pool) error
	}{
		{"Process", func(c *inbox.Client[pgx.Tx], _ *pgxpool.Pool) error {
			_, err := c.Process(ctx, "billing", inbox.Message{ID: inboxtest.NewID()}, noop)
			return err
		}},
		{"ProcessBatch", func(c *inbox.Client[pgx.Tx], _ *pgxpool.Pool) error {
			rs, err := c.ProcessBatch(ctx, "billing", []inbox.Message{{ID: inboxtest.NewID()}, {ID: inboxtest.NewID()}}, noop)
			if err != nil {
				return err
			}
			return rs[0].Err
		}},
		{"pipelined", func(c *inbox.Client[pgx.Tx], _ *pgxpool.Pool) error {
			_, err := c.Process(ctx, "billing", inbox.Message{ID: inboxtest.NewID()}, pipelined)
			return err
		}},
		{"ClaimTx", func(c *inbox.Client[pgx.Tx], pool *pgxpool.Pool) error {
			tx, err := pool.Begin(ctx)
			if err != nil {
				return err
			}
			defer tx.Rollback(ctx)
			_, err = c.ClaimTx(ctx, tx, "billing", inbox.Message{ID: inboxtest.NewID()})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A pool of its own, of one connection, which has prepared
			// nothing yet.
			pool, err := pgxpool.New(ctx, testdb.URL(t)+"&pool_max_conns=1")
			require.NoError(t, err)
			defer pool.Close()
			fresh, err := inboxpgx.New(pool, &inboxpgx.Config{Tables: inboxdriver.Tables{Schema: schema}})
			require.NoError(t, err)
			c, err := inbox.NewClient(fresh, &inbox.Config{LockTimeout: 100 * time.Millisecond, MaxConflictRetries: -1})
			require.NoError(t, err)

			err = tc.run(c, pool)
			require.ErrorIs(t, err, inbox.ErrLockTimeout)
			require.True(t, inbox.IsRetryable(err))
			var one int
			require.NoError(t, holder.QueryRow(ctx, `SELECT 1`).Scan(&one), "the table lock was released before the claim gave up")

			// The connection keeps its own lock_timeout.
			var v string
			require.NoError(t, pool.QueryRow(ctx, `SHOW lock_timeout`).Scan(&v))
			require.Equal(t, "0", v)
		})
	}
}

// TestSessionLockTimeoutMatchingTheClaim checks a pool whose sessions
// already have the client's lock timeout, where the claim sends no
// statements around it: the bound still holds, for the claim and, as the
// session says, for the handler.
func TestSessionLockTimeoutMatchingTheClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, schema := newDriver(t, inboxdriver.Tables{})
	own := ownPool(t, 2, func(cfg *pgxpool.Config) { cfg.ConnConfig.RuntimeParams["lock_timeout"] = "200" })
	od, err := inboxpgx.New(own, &inboxpgx.Config{Tables: inboxdriver.Tables{Schema: schema}})
	require.NoError(t, err)
	c, err := inbox.NewClient(od, &inbox.Config{LockTimeout: 200 * time.Millisecond, MaxConflictRetries: -1})
	require.NoError(t, err)

	var got []string
	inboxtest.RequireApplied(t)(c.Process(ctx, "billing", inbox.Message{ID: inboxtest.NewID()}, showLockTimeout(&got)))
	require.Equal(t, []string{"200ms"}, got)

	held := inboxtest.NewID()
	tx, claimed, err := d.BeginClaim(ctx, &inboxdriver.ClaimParams{Consumer: "billing", IDs: []string{held}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Rollback(context.Background(), tx) })
	require.True(t, claimed[0])
	_, err = c.Process(ctx, "billing", inbox.Message{ID: held}, showLockTimeout(&got))
	require.ErrorIs(t, err, inbox.ErrLockTimeout)
	require.Equal(t, inbox.FaultContention, inbox.Judge(err))
	require.Len(t, got, 1)
}
