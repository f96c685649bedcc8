package inboxpgx_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/inboxtest"
	"github.com/txinbox/inbox/internal/require"
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
	cfg, err := pgxpool.ParseConfig(testdb.URL(t))
	require.NoError(t, err)
	cfg.MaxConns = 2
	cfg.ConnConfig.RuntimeParams["lock_timeout"] = "777ms"
	own, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(own.Close)
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

// TestProcessTxRestoresCallersLockTimeout checks that a claim in the
// caller's transaction leaves the caller's own lock_timeout in place, on
// the applied path and on the duplicate path.
func TestProcessTxRestoresCallersLockTimeout(t *testing.T) {
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
		out, err := c.ProcessTx(ctx, tx, "billing", inbox.Message{ID: id})
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
	tx, claimed, err := d.BeginClaim(ctx, &inboxdriver.ClaimParams{Consumer: "billing", ID: held})
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Rollback(context.Background(), tx) })
	require.True(t, claimed)

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
