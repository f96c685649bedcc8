package inboxcli_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox/internal/pgcluster"
	"github.com/txinbox/inbox/internal/testdb"
)

// TestDoctorReplication runs the doctor against a primary and a streaming
// replica of our own: on the standby it fails, on a primary with an
// asynchronous standby it warns of the loss on failover, and with a single
// synchronous standby of the stall if it goes.
func TestDoctorReplication(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, err := pgcluster.Start(ctx, &pgcluster.Config{Replica: true})
	testdb.Require(t, "a Postgres cluster of our own", err)
	t.Cleanup(c.Close)
	t.Cleanup(func() {
		if t.Failed() {
			var b strings.Builder
			c.Log(&b)
			t.Log(b.String())
		}
	})
	primary := map[string]string{"DATABASE_URL": c.Primary.URL()}
	code, _, stderr := run(t, primary, "migrate", "up")
	require.Equal(t, 0, code, stderr)
	require.NoError(t, c.CatchUp(ctx))

	// The standby itself.
	code, r, _ := doctor(t, map[string]string{"DATABASE_URL": c.Replica.URL()})
	require.Equal(t, 1, code)
	require.False(t, r.OK)
	st, msg := r.status(t, "replication")
	require.Equal(t, "fail", st, msg)
	require.Contains(t, msg, "standby")
	require.Contains(t, fixOf(r, "replication"), "target_session_attrs=read-write")

	// The primary, with an asynchronous standby.
	code, r, _ = doctor(t, primary)
	require.Equal(t, 0, code, "%+v", r)
	st, msg = r.status(t, "replication")
	require.Equal(t, "warn", st, msg)
	require.Contains(t, msg, pgcluster.ReplicaName)
	require.Contains(t, msg, "asynchronous")
	require.Contains(t, msg, "2,779 of 20,000")
	require.Contains(t, fixOf(r, "replication"), "synchronous_standby_names")

	// Through the URL that names both: the primary.
	_, r, _ = doctor(t, map[string]string{"DATABASE_URL": c.URL()})
	st, _ = r.status(t, "replication")
	require.Equal(t, "warn", st)

	// A single synchronous standby.
	require.NoError(t, c.SetSynchronousStandbyNames(ctx, pgcluster.ReplicaName))
	code, r, _ = doctor(t, primary)
	require.Equal(t, 0, code, "%+v", r)
	st, msg = r.status(t, "replication")
	require.Equal(t, "warn", st, msg)
	require.Contains(t, msg, "if it goes, every commit waits")
	fix := fixOf(r, "replication")
	require.Contains(t, fix, "ANY 1 (s1, s2)")
	require.Contains(t, fix, "commit timeout")
}

func fixOf(r doctorReport, name string) string {
	for _, c := range r.Checks {
		if c.Name == name {
			return c.Fix
		}
	}
	return ""
}
