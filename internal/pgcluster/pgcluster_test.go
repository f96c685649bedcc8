package pgcluster_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox/internal/pgcluster"
	"github.com/txinbox/inbox/internal/testdb"
)

func start(t *testing.T, cfg *pgcluster.Config) *pgcluster.Cluster {
	t.Helper()
	c, err := pgcluster.Start(context.Background(), cfg)
	testdb.Require(t, "a Postgres cluster of our own", err)
	t.Cleanup(c.Close)
	t.Cleanup(func() {
		if t.Failed() {
			var b strings.Builder
			c.Log(&b)
			t.Log(b.String())
		}
	})
	return c
}

// A synchronous cluster fails over: what the primary committed is on the
// promoted replica, which then accepts writes, while the cut link kept a
// commit from returning.
func TestFailoverSync(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := start(t, &pgcluster.Config{Replica: true, Synchronous: true})
	require.Contains(t, c.URL(), ",127.0.0.1:")
	require.Contains(t, c.URL(), "target_session_attrs=read-write")
	_, err := c.Query(ctx, c.Primary, `CREATE TABLE t (n int)`, `INSERT INTO t VALUES (1)`)
	require.NoError(t, err)
	out, err := c.Query(ctx, c.Replica, `SELECT count(*) FROM t`)
	require.NoError(t, err, "a synchronous commit is on the replica when it returns")
	require.Equal(t, "1", out)
	out, err = c.Query(ctx, c.Replica, `SELECT pg_is_in_recovery()`)
	require.NoError(t, err)
	require.Equal(t, "t", out)

	c.CutReplication()
	// With the link cut, a commit waits for the replica: it does not
	// return within a few seconds.
	qctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, err = c.Query(qctx, c.Primary, `INSERT INTO t VALUES (2)`)
	require.Error(t, err)

	require.NoError(t, c.KillPrimary())
	require.NoError(t, c.Promote(ctx))
	_, err = c.Query(ctx, c.Replica, `INSERT INTO t VALUES (3)`)
	require.NoError(t, err, "the promoted replica accepts writes, and waits for no standby")
	out, err = c.Query(ctx, c.Replica, `SELECT string_agg(n::text, ',' ORDER BY n) FROM t`)
	require.NoError(t, err)
	require.Equal(t, "1,3", out)
}

// An asynchronous cluster with the link cut loses what the primary
// committed after the cut.
func TestFailoverAsyncLoses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := start(t, &pgcluster.Config{Replica: true})
	_, err := c.Query(ctx, c.Primary, `CREATE TABLE t (n int)`)
	require.NoError(t, err)
	require.NoError(t, c.CatchUp(ctx))
	out, err := c.Query(ctx, c.Replica, `SELECT count(*) FROM t`)
	require.NoError(t, err)
	require.Equal(t, "0", out)
	c.CutReplication()
	_, err = c.Query(ctx, c.Primary, `INSERT INTO t VALUES (1)`)
	require.NoError(t, err, "an asynchronous commit returns without the replica")
	require.NoError(t, c.KillPrimary())
	require.NoError(t, c.Promote(ctx))
	out, err = c.Query(ctx, c.Replica, `SELECT count(*) FROM t`)
	require.NoError(t, err)
	require.Equal(t, "0", out, "the acknowledged commit is gone")
}

// A lone server, as testdb starts one.
func TestLone(t *testing.T) {
	t.Parallel()
	c := start(t, nil)
	require.Nil(t, c.Replica)
	require.Equal(t, c.Primary.URL(), c.URL())
	out, err := c.Query(context.Background(), c.Primary, `SELECT current_setting('fsync')`)
	require.NoError(t, err)
	require.Equal(t, "on", out)
}
