package inboxpgx_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
)

// TestPurgeRestEndsOnCancel checks that a purge resting between batches
// stops when its context ends, reporting what it deleted so far.
func TestPurgeRestEndsOnCancel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, schema := newDriver(t, inboxdriver.Tables{})
	_, err := d.Pool().Exec(ctx, `INSERT INTO "`+schema+`".inbox (consumer_name, message_id, processed_at)
SELECT 'billing', gen_random_uuid(), now() - interval '60 days' FROM generate_series(1, 3)`)
	require.NoError(t, err)
	// The most rest there is: a hundred times each batch's time.
	c, err := inbox.NewClient(d, &inbox.Config{PurgeRest: 100})
	require.NoError(t, err)
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	n, err := c.Admin().Purge(pctx, inbox.PurgeParams{OlderThan: 30 * 24 * time.Hour, BatchSize: 1, Progress: func(int64) { cancel() }})
	require.ErrorIs(t, err, context.Canceled)
	require.EqualValues(t, 1, n)

	// Without a rest the same purge runs to the end.
	c, err = inbox.NewClient(d, &inbox.Config{PurgeRest: -1})
	require.NoError(t, err)
	n, err = c.Admin().Purge(ctx, inbox.PurgeParams{OlderThan: 30 * 24 * time.Hour, BatchSize: 1})
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	require.Zero(t, c.Config().PurgeRest)
}

func TestPurgeRestConfig(t *testing.T) {
	t.Parallel()
	d, _ := newDriver(t, inboxdriver.Tables{})
	c, err := inbox.NewClient(d, nil)
	require.NoError(t, err)
	require.Equal(t, inbox.DefaultPurgeRest, c.Config().PurgeRest)
	for _, bad := range []float64{math.NaN(), math.Inf(1), 101} {
		_, err := inbox.NewClient(d, &inbox.Config{PurgeRest: bad})
		require.ErrorContains(t, err, "Config.PurgeRest", "%v", bad)
	}
}
