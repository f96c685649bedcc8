package inboxcli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox/cmd/inbox/inboxcli"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/internal/pglock"
	"github.com/txinbox/inbox/internal/testdb"
	"github.com/txinbox/inbox/outbox"
)

// heldAdvisoryLocks counts the advisory locks held in the test database
// with one of ids, asked of the server directly.
func heldAdvisoryLocks(t *testing.T, ids ...int64) int {
	t.Helper()
	var n int
	require.NoError(t, inboxcli.SharedPool(t).QueryRow(context.Background(), `SELECT count(*) FROM pg_locks
  WHERE locktype = 'advisory' AND objsubid = 1
    AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
    AND ((classid::bigint << 32) | objid::bigint) = ANY($1)`, ids).Scan(&n))
	return n
}

// The CLI through PgBouncer, in transaction and in session pooling, with
// the URL as a user gives it: 8 concurrent 'migrate up' all finish and
// leave no advisory lock held, 'doctor' finds nothing wrong (and no
// SQLSTATE), and 'relay --once' publishes the outbox.
func TestThroughPgBouncer(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{testdb.PoolTransaction, testdb.PoolSession} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			env := map[string]string{"DATABASE_URL": testdb.PgBouncer(t, mode)}
			schema := testdb.Schema(t)
			with := func(args ...string) []string { return append(args, "--schema", schema) }

			const migrators = 8
			type result struct {
				code           int
				stdout, stderr string
			}
			results := make(chan result, migrators)
			for range migrators {
				go func() {
					code, stdout, stderr := run(t, env, with("migrate", "up")...)
					results <- result{code, stdout, stderr}
				}()
			}
			bound := time.NewTimer(90 * time.Second)
			defer bound.Stop()
			for i := range migrators {
				select {
				case r := <-results:
					require.Equal(t, 0, r.code, "migrator %d: %s", i, r.stderr)
				case <-bound.C:
					t.Fatalf("%d of %d 'migrate up' did not finish within 90s", migrators-i, migrators)
				}
			}
			tables := inboxdriver.Tables{Schema: schema}.WithDefaults()
			migrateLock := pglock.ID("inbox-migrate:" + tables.Schema + "." + tables.Migrations)
			require.Equal(t, 0, heldAdvisoryLocks(t, migrateLock), "an advisory lock is left held")
			// And directly, as the probe found hanging.
			code, stdout, stderr := run(t, map[string]string{"DATABASE_URL": testdb.URL(t)}, with("migrate", "up")...)
			require.Equal(t, 0, code, stderr)
			require.Contains(t, stdout, "up to date")

			code, stdout, stderr = run(t, env, with("doctor", "--json")...)
			require.Equal(t, 0, code, "%s %s", stdout, stderr)
			require.NotContains(t, stdout+stderr, "SQLSTATE")
			var r doctorReport
			require.NoError(t, json.Unmarshal([]byte(stdout), &r))
			st, msg := r.status(t, "pooler")
			require.Equal(t, "ok", st, msg)
			if mode == testdb.PoolTransaction {
				require.Contains(t, msg, "a transaction pooler is in front of the database, and exec mode cache_describe works behind it")
			} else {
				require.Contains(t, msg, "no transaction pooler seen")
			}

			// The outbox, published through the pooler.
			code, _, stderr = run(t, env, with("outbox", "stats")...)
			require.Equal(t, 0, code, stderr)
			d := pgxDriver(t, inboxdriver.Tables{Schema: schema})
			o, err := outbox.New(d, nil)
			require.NoError(t, err)
			var ids []string
			for i := range 5 {
				got, err := o.Enqueue(ctx, outbox.Message{Topic: "orders", Key: []byte(fmt.Sprint("k", i%2)), Payload: []byte(`{}`)})
				require.NoError(t, err)
				ids = append(ids, got...)
			}
			cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"))
			require.NoError(t, err)
			t.Cleanup(cluster.Close)
			brokers := cluster.ListenAddrs()[0]
			code, stdout, stderr = run(t, env, with("relay", "--brokers", brokers, "--once")...)
			require.Equal(t, 0, code, stderr)
			require.Contains(t, stdout, "published 5 events")
			cl, err := kgo.NewClient(kgo.SeedBrokers(brokers), kgo.ConsumeTopics("orders"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			require.NoError(t, err)
			t.Cleanup(cl.Close)
			got := map[string]bool{}
			for range 20 {
				if len(got) == len(ids) {
					break
				}
				pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				fetches := cl.PollFetches(pctx)
				cancel()
				fetches.EachRecord(func(r *kgo.Record) {
					for _, h := range r.Headers {
						if h.Key == outbox.HeaderEventID {
							got[string(h.Value)] = true
						}
					}
				})
			}
			for _, id := range ids {
				require.True(t, got[id], "event %s was not published", id)
			}
		})
	}
}

// 'doctor' through a transaction pooler with pgx's default exec mode
// named in the URL fails the pooler check and says what to change.
func TestDoctorPoolerUnsafeExecMode(t *testing.T) {
	t.Parallel()
	u := testdb.PgBouncer(t, testdb.PoolTransaction) + "&default_query_exec_mode=cache_statement"
	schema := testdb.Schema(t)
	code, stdout, stderr := run(t, map[string]string{"DATABASE_URL": u}, "doctor", "--json", "--schema", schema)
	require.Equal(t, 1, code, stderr)
	var r doctorReport
	require.NoError(t, json.Unmarshal([]byte(stdout), &r))
	for _, c := range r.Checks {
		if c.Name == "pooler" {
			require.Equal(t, "fail", c.Status, c.Message)
			require.Contains(t, c.Message, "exec mode cache_statement prepares statements")
			require.Contains(t, c.Fix, "default_query_exec_mode=cache_describe")
			return
		}
	}
	t.Fatalf("no pooler check in %s", stdout)
}
