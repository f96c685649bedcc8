package labcli

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox/cmd/inboxlab/internal/bench"
	"github.com/txinbox/inbox/cmd/inboxlab/internal/redis"
	"github.com/txinbox/inbox/internal/command/commandtest"
	"github.com/txinbox/inbox/internal/testdb"
)

// requireRedis skips the test, or fails it in CI, when the machine's Redis
// does not answer.
func requireRedis(t *testing.T) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", bench.DefaultRedisAddr, 2*time.Second)
	if err == nil {
		conn.Close()
	}
	testdb.Require(t, "Redis at "+bench.DefaultRedisAddr, err)
}

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return commandtest.Run(t, Main, nil, args...)
}

// TestBenchQuickJSON runs a small variant of 'inboxlab bench --quick --json'
// in process and checks the JSON's shape: exactly one object on stdout,
// every row at every worker count with positive figures, the purge and the
// id comparison, and nothing left behind in Postgres or Redis. It asserts
// nothing about speed.
func TestBenchQuickJSON(t *testing.T) {
	t.Parallel()
	url := testdb.URL(t)
	requireRedis(t)
	code, stdout, stderr := runCLI(t, "bench", "--quick", "--json", "--database-url", url,
		"--workers", "1,3", "--rounds", "1", "--warmup", "20ms", "--duration", "100ms",
		"--purge-rows", "20000", "--purge-baseline", "200ms", "--id-rows", "5000", "--id-duration", "200ms", "--id-rounds", "1",
		"--relay-backlogs", "200,2000")
	require.Equal(t, 0, code, "stderr: %s", stderr)

	// Exactly one JSON object, and nothing after it.
	dec := json.NewDecoder(strings.NewReader(stdout))
	var raw map[string]json.RawMessage
	require.NoError(t, dec.Decode(&raw))
	_, err := dec.Token()
	require.ErrorIs(t, err, io.EOF, "stdout must hold one JSON object and nothing else")
	require.Contains(t, raw, "results")

	var rep bench.Report
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep))
	var loose struct {
		Results []map[string]any `json:"results"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &loose))

	type key struct {
		name    string
		workers int
	}
	seen := map[key]bool{}
	for _, r := range loose.Results {
		name, _ := r["name"].(string)
		workers, _ := r["workers"].(float64)
		k := key{name, int(workers)}
		require.False(t, seen[k], "row %v twice", k)
		seen[k] = true
		for _, f := range []string{"msgs_per_s", "p50_ms", "p99_ms"} {
			v, ok := r[f].(float64)
			require.True(t, ok, "%v: %s missing or not a number", k, f)
			require.Positive(t, v, "%v: %s", k, f)
		}
		require.GreaterOrEqual(t, r["p99_ms"].(float64), r["p50_ms"].(float64), "%v", k)
		// The rows whose inbox is the Postgres table report its size.
		if strings.HasPrefix(name, "inbox") && !strings.HasPrefix(name, "inbox-sqlite") || name == "kafka-inbox-batch-100" {
			require.Positive(t, r["inbox_bytes_per_row"], "%v: inbox_bytes_per_row", k)
			require.Contains(t, r, "wal_bytes_per_msg", "%v", k)
		}
	}
	for _, name := range bench.RowNames() {
		for _, w := range []int{1, 3} {
			require.True(t, seen[key{name, w}], "row %s at %d workers is missing", name, w)
		}
	}
	require.Len(t, loose.Results, len(bench.RowNames())*2)

	require.NotNil(t, rep.Purge)
	require.NotNil(t, rep.IDs)
	require.EqualValues(t, 20000, rep.Purge.Rows)
	for _, f := range []float64{rep.Purge.Without.MsgsPerS, rep.Purge.Without.P99Ms, rep.Purge.During.MsgsPerS, rep.Purge.During.P99Ms} {
		require.Positive(t, f)
	}
	// The retention comparison: the batched delete against the partition
	// drop, and claims on 40 partitions against the plain inbox, with
	// their targets.
	require.NotNil(t, rep.Partition)
	require.Equal(t, 20000, rep.Partition.Rows)
	require.Equal(t, 40, rep.Partition.Partitions)
	for _, f := range []float64{rep.Partition.Delete.S, float64(rep.Partition.Delete.WALBytes), rep.Partition.Drop.S, float64(rep.Partition.Drop.WALBytes),
		rep.Partition.WALRatio, rep.Partition.Delete.Without.P99Ms, rep.Partition.Delete.During.P99Ms, rep.Partition.Drop.Without.P99Ms,
		rep.Partition.Drop.During.P99Ms, rep.Partition.Drop.UnderLoadS, rep.Partition.PlainClaims.MsgsPerS, rep.Partition.PartitionedClaims.MsgsPerS,
		rep.Partition.ClaimsRatio} {
		require.Positive(t, f)
	}
	var targets []string
	for _, r := range rep.Targets {
		targets = append(targets, r.Name)
	}
	for _, want := range []string{"partition drop: claims' p99 during", "WAL of the batched delete ÷ WAL of the partition drop", "claims on 40 partitions ÷ on the plain inbox"} {
		require.True(t, slices.ContainsFunc(targets, func(n string) bool { return strings.HasPrefix(n, want) }), "target %q in %v", want, targets)
	}
	// The drain rows: the ordered relay at each backlog, the unordered at
	// the largest, with the ordered relay's two targets.
	require.NotNil(t, rep.Relay)
	require.Len(t, rep.Relay.Drains, 6)
	for _, d := range rep.Relay.Drains {
		require.Positive(t, d.MsgsPerS, "%s at %d", d.Name, d.Events)
	}
	for _, want := range []string{"ordered relay, 4 keys, to the null sink: msgs/s at a backlog of 2000 ÷ at 200 (≥ 0.8",
		"ordered relay, 4 keys ÷ unordered relay, to the null sink: msgs/s at a backlog of 2000 (≥ 0.5)"} {
		require.True(t, slices.ContainsFunc(targets, func(n string) bool { return strings.HasPrefix(n, want) }), "target %q in %v", want, targets)
	}
	for _, f := range []float64{rep.IDs.V4.MsgsPerS, rep.IDs.V4.P99Ms, rep.IDs.V4.WALBytesPerMsg, rep.IDs.V4.InboxBytesPerRow,
		rep.IDs.V7.MsgsPerS, rep.IDs.V7.P99Ms, rep.IDs.V7.WALBytesPerMsg, rep.IDs.V7.InboxBytesPerRow} {
		require.Positive(t, f)
	}

	// The run cleaned up after itself.
	require.True(t, strings.HasPrefix(rep.Settings.Schema, "inbox_bench_"), "schema %q", rep.Settings.Schema)
	var n int
	require.NoError(t, testPool(t).QueryRow(context.Background(),
		`SELECT count(*) FROM pg_namespace WHERE nspname = $1`, rep.Settings.Schema).Scan(&n))
	require.Zero(t, n, "schema %s was not dropped", rep.Settings.Schema)
	rdb, err := redis.Dial(context.Background(), bench.DefaultRedisAddr, 1)
	require.NoError(t, err)
	defer rdb.Close()
	var cursor uint64
	for range 100_000 {
		keys, next, err := rdb.Scan(context.Background(), cursor, "inbox-bench:"+rep.Settings.Schema+":*", 1000)
		require.NoError(t, err)
		require.Empty(t, keys, "Redis keys of the run were not deleted")
		if cursor = next; cursor == 0 {
			break
		}
	}
	require.Zero(t, cursor, "the scan of Redis did not finish")
}

// TestBenchMarkdown checks that a run without --json prints Markdown
// tables with one line per row and worker count.
func TestBenchMarkdown(t *testing.T) {
	t.Parallel()
	url := testdb.URL(t)
	code, stdout, stderr := runCLI(t, "bench", "--database-url", url, "--redis-addr", "",
		"--rows", "bare,inbox", "--workers", "2", "--rounds", "1", "--warmup", "0s", "--duration", "100ms",
		"--purge-rows", "0", "--id-rows", "0")
	require.Equal(t, 0, code, "stderr: %s", stderr)
	require.Contains(t, stdout, "| row | workers | msgs/s |")
	require.Contains(t, stdout, "| `bare` | 2 |")
	require.Contains(t, stdout, "| `inbox` | 2 |")
	require.NotContains(t, stdout, "Purge under load")
	require.NotContains(t, stdout, "redis-setnx")
}

// TestBenchUsage checks that bad flags are usage errors, exit 2, and touch
// no database.
func TestBenchUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--rows", "bare,nope"},
		{"--workers", "1,x"},
		{"--workers", "0"},
		{"--rounds", "-1"},
		{"--purge-rows", "-5", "--id-rows", "-7", "--duration", "-1s"},
		{"--relay-backlogs", "100,x"},
		{"--relay-backlogs", "-5"},
		{"--rows", "relay-nope"},
		{"extra"},
	} {
		code, stdout, stderr := runCLI(t, append([]string{"bench", "--database-url", "postgres://nobody@127.0.0.1:1/none"}, args...)...)
		require.Equal(t, 2, code, "%v: stderr %s", args, stderr)
		require.Empty(t, stdout, "%v", args)
		require.NotContains(t, stderr, "cannot reach", "%v", args)
	}
}

// TestBenchUnreachableDatabase checks that a database that does not answer
// is a plain failure that names it.
func TestBenchUnreachableDatabase(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := runCLI(t, "bench", "--database-url", "postgres://nobody@127.0.0.1:1/none?connect_timeout=2", "--rows", "bare")
	require.Equal(t, 1, code)
	require.Empty(t, stdout)
	require.Contains(t, stderr, "127.0.0.1:1/none")
}

// TestBenchDatabaseURL checks where bench finds its database, as every
// command of the lab does: --database-url, then DATABASE_URL, then the
// local test server; TEST_DATABASE_URL is the tests' own.
func TestBenchDatabaseURL(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"DATABASE_URL":      "postgres://nobody@127.0.0.1:1/from_env?connect_timeout=2",
		"TEST_DATABASE_URL": "postgres://nobody@127.0.0.1:1/from_test_env?connect_timeout=2",
	}
	code, stdout, stderr := commandtest.Run(t, Main, env, "bench", "--rows", "bare")
	require.Equal(t, 1, code)
	require.Empty(t, stdout)
	require.Contains(t, stderr, "127.0.0.1:1/from_env")

	code, _, stderr = commandtest.Run(t, Main, env, "bench", "--rows", "bare", "--database-url", "postgres://nobody@127.0.0.1:1/from_flag?connect_timeout=2")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "127.0.0.1:1/from_flag")

	code, stdout, _ = commandtest.Run(t, Main, nil, "bench", "-h")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "default $DATABASE_URL, then "+bench.DefaultDatabaseURL)
}
