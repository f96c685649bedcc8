//go:build unix

package labcli_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox/cmd/inboxlab/internal/bench"
	"github.com/txinbox/inbox/cmd/inboxlab/internal/redis"
	"github.com/txinbox/inbox/cmd/inboxlab/labcli"
	"github.com/txinbox/inbox/internal/testdb"
)

// SIGINT (Ctrl-C) ends a long lab run after its cleanup: exit 130, and one
// line that says what the cleanup removed, which is then gone.
func TestSIGINTEndsALabRunAfterItsCleanup(t *testing.T) {
	t.Parallel()
	url := testdb.URL(t)
	for _, tc := range []struct {
		name    string
		args    []string
		running string // in a progress line that says the run is under way
	}{
		{"chaos", []string{"chaos", "-v", "--duration", "1m", "--db-faults", "none"}, "chaos: consumer "},
		{"demo", []string{"demo", "-v", "--database-url", url}, "demo: "},
		{"bench", []string{"bench", "--quick", "--rows", "inbox", "--workers", "1", "--purge-rows", "0", "--id-rows", "0", "--rounds", "50"}, " schema inbox_bench_"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			last := interrupt(t, url, tc.args, tc.running)
			require.Contains(t, last, "inboxlab "+tc.name+": interrupted by SIGINT; ")

			// The schema the line names is gone.
			m := regexp.MustCompile(`dropped schema (\S+?)(,|$)`).FindStringSubmatch(last)
			require.NotNil(t, m, "no dropped schema in %q", last)
			requireNoSchema(t, url, m[1])
		})
	}
}

// SIGINT on a bench that has its RabbitMQ queues, its Redis keys and its
// Postgres schema names all three in its last line, and they are gone.
func TestSIGINTBenchNamesQueuesKeysAndSchema(t *testing.T) {
	t.Parallel()
	url := testdb.URL(t)
	labcli.RequireRedis(t)
	conn, err := amqp.Dial(bench.DefaultAMQPURL)
	testdb.Require(t, "RabbitMQ at "+bench.DefaultAMQPURL, err)
	defer conn.Close()

	// The redis-setnx row runs first, with no broker open; then the
	// RabbitMQ row, with its queues: the signal comes as that starts,
	// when the Redis keys are written and the queues declared. Its
	// hundred rounds are the margin, not a timing.
	last := interrupt(t, url, []string{"bench", "--quick", "--rows", "redis-setnx,rabbitmq-inbox-batch-100", "--workers", "1",
		"--purge-rows", "0", "--id-rows", "0", "--relay-backlogs", "0", "--rounds", "100", "--warmup", "10ms", "--duration", "50ms"},
		"the rows that need rabbitmq")
	m := regexp.MustCompile(`^inboxlab bench: interrupted by SIGINT; deleted 2 RabbitMQ queues (inbox_bench_\w+)\.\*, ` +
		`deleted (\d+) Redis keys? inbox-bench:(inbox_bench_\w+):\*, dropped schema (inbox_bench_\w+)$`).FindStringSubmatch(last)
	require.NotNil(t, m, "the last line: %q", last)
	schema := m[4]
	require.Equal(t, schema, m[1])
	require.Equal(t, schema, m[3])
	require.NotEqual(t, "0", m[2], "the redis-setnx row wrote keys")

	requireNoSchema(t, url, schema)
	rdb, err := redis.Dial(context.Background(), bench.DefaultRedisAddr, 1)
	require.NoError(t, err)
	defer rdb.Close()
	keys, _, err := rdb.Scan(context.Background(), 0, "inbox-bench:"+schema+":*", 1000)
	require.NoError(t, err)
	require.Empty(t, keys)
	for _, q := range []string{schema + ".inbox.0", schema + ".bare.0"} {
		ch, err := conn.Channel()
		require.NoError(t, err)
		_, err = ch.QueueDeclarePassive(q, true, false, false, false, nil)
		var aerr *amqp.Error
		require.True(t, errors.As(err, &aerr) && aerr.Code == amqp.NotFound, "queue %s: %v", q, err)
	}
}

// interrupt runs the lab command args as a process of its own, sends it
// SIGINT once a line of its stderr contains running, and returns its last
// line, after checking that it exited 130.
func interrupt(t *testing.T, url string, args []string, running string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), runMainEnv+"=1", "DATABASE_URL="+url)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	// Read stderr until the run says it is under way, then keep reading
	// it to the end.
	lines := make(chan string, 1024)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	var seen []string
	for l := range lines {
		seen = append(seen, l)
		if strings.Contains(l, running) {
			break
		}
	}
	require.True(t, len(seen) > 0 && strings.Contains(seen[len(seen)-1], running), "the run never said it was under way: %q", seen)

	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	var last string
	ended := time.After(60 * time.Second) // a generous bound for "it ended", not a timing
read:
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				break read
			}
			seen = append(seen, l)
			last = l
		case <-ended:
			t.Fatalf("the run did not end after SIGINT; stderr: %q", seen)
		}
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "exit: %v", err)
	require.Equal(t, 130, exit.ExitCode(), "stderr: %q", seen)
	return last
}

// requireNoSchema fails t when the schema exists.
func requireNoSchema(t *testing.T, url, schema string) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var n int
	require.NoError(t, conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, schema).Scan(&n))
	require.Equal(t, 0, n, "schema %s still exists", schema)
}
