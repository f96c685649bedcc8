package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver testdb needs

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/cmd/inboxlab/internal/child/childtest"
	"github.com/txinbox/inbox/internal/testdb"
)

// The chaos tests start consumers by running this test binary again with
// INBOX_CHAOS_CONSUMER set: TestMain then runs one consumer instead of the
// tests. INBOX_CHAOS_IDLE runs a stand-in consumer instead (runIdle).
func TestMain(m *testing.M) {
	if mode := os.Getenv("INBOX_CHAOS_IDLE"); mode != "" {
		runIdle(mode)
		os.Exit(0)
	}
	childtest.Run(consumerEnv, "chaos consumer", func(ctx context.Context, args []string) error {
		return RunConsumer(ctx, args, os.Stdout, os.Stderr)
	})
	testdb.Main(m)
}

// consumerEnv makes this test binary one consumer of a run.
const consumerEnv = "INBOX_CHAOS_CONSUMER"

func consumerCommand(args []string) *exec.Cmd { return childtest.Command(consumerEnv, args) }

// logWriter sends progress lines to the test log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func run(t *testing.T, cfg Config) *Result {
	t.Helper()
	cfg.DatabaseURL = testdb.URL(t)
	cfg.Command = consumerCommand
	cfg.Log = logWriter{t}
	ctx, cancel := context.WithTimeout(context.Background(), 3*cfg.Duration+time.Minute)
	defer cancel()
	res, err := Run(ctx, cfg)
	require.NoError(t, err)
	t.Logf("result: %+v", *res)
	return res
}

// requireExactlyOnce checks a run that killed consumers and delivered
// duplicates: every event applied once, none lost, every balance right.
func requireExactlyOnce(t *testing.T, res *Result) {
	t.Helper()
	require.True(t, res.OK, "problems: %v", res.Problems)
	require.Zero(t, res.DoubleApplied)
	require.Zero(t, res.Lost)
	require.Zero(t, res.BalancesWrong)
	require.Equal(t, res.Events-res.CrashPoisonSent, res.InboxRows)
	require.Equal(t, res.CrashPoisonSent, res.CrashPoisonDeadLettered, "crash-poison events dead-lettered as crashed_consumer")
	require.Positive(t, res.CrashPoisonSent, "a run sends crash-poison events")
	require.GreaterOrEqual(t, res.PoisonCrashes, res.CrashPoisonSent, "every crash-poison event took a consumer down")
	require.GreaterOrEqual(t, res.Kills, 5)
	require.Zero(t, res.DeadLetteredHealthy, "healthy events dead-lettered")
	injected := 0
	for _, n := range res.DBFaults {
		injected += n
	}
	require.Positive(t, injected, "the run must inject database faults: %v", res.DBFaults)
	require.Positive(t, res.DuplicatesDelivered, "the run must deliver duplicates for the check to mean anything")
}

// The SQS run kills real consumer processes at the named fault points and
// at random times, terminates their connections and fails broker requests,
// and every event is still applied exactly once. goaws state is global to
// the process, so SQS runs are not parallel.
func TestChaosSQS(t *testing.T) {
	res := run(t, Config{Transport: "sqs", Duration: 30 * time.Second, Events: 1500})
	requireExactlyOnce(t, res)
}

// TestTallyCrashPoison: a crash-poison event counts only when it was
// dead-lettered as crashed_consumer and never applied, and a healthy event
// that was dead-lettered is a problem.
func TestTallyCrashPoison(t *testing.T) {
	t.Parallel()
	events := []event{{ID: "a", Account: 1, Amount: 10}, {ID: "p", Account: 1, Amount: 99, Crash: crashInHandler},
		{ID: "q", Account: 2, Amount: 5, Crash: crashInGoroutine}, {ID: "h", Account: 2, Amount: 1}}
	res := &Result{Events: len(events), CrashPoisonSent: 2, InboxRows: 2}
	dead := map[string]string{"p": inbox.ReasonCrashedConsumer, "q": inbox.ReasonMaxAttempts, "h": inbox.ReasonPermanent}
	tally(events, map[string]int{"a": 1, "h": 1}, map[int]int64{1: 10, 2: 1}, dead, res)
	require.Equal(t, 1, res.CrashPoisonDeadLettered, "q was dead-lettered for another reason")
	require.Equal(t, 1, res.DeadLetteredHealthy, "h only: the crash-poison dead letters are not healthy events")
	require.Zero(t, res.Lost)
	require.Zero(t, res.BalancesWrong, "the crash-poison amounts are not expected in the balances")
	require.Len(t, res.Problems, 1)
	require.Contains(t, res.Problems[0], "healthy event h")
	require.Contains(t, res.failure(), "1 of 2 crash-poison events dead-lettered")
	require.Contains(t, res.failure(), "1 healthy events dead-lettered")

	// Intended dead letters only: the run is OK.
	ok := &Result{Events: len(events), CrashPoisonSent: 2, InboxRows: 2}
	dead = map[string]string{"p": inbox.ReasonCrashedConsumer, "q": inbox.ReasonCrashedConsumer}
	tally(events, map[string]int{"a": 1, "h": 1}, map[int]int64{1: 10, 2: 1}, dead, ok)
	require.Equal(t, 2, ok.CrashPoisonDeadLettered)
	require.Zero(t, ok.DeadLetteredHealthy)
	require.Empty(t, ok.failure())

	// A dead letter of no event of the run is no intended one either.
	stray := &Result{Events: len(events), CrashPoisonSent: 2, InboxRows: 2}
	dead = map[string]string{"p": inbox.ReasonCrashedConsumer, "q": inbox.ReasonCrashedConsumer, "x": inbox.ReasonMalformedID}
	tally(events, map[string]int{"a": 1, "h": 1}, map[int]int64{1: 10, 2: 1}, dead, stray)
	require.Equal(t, 1, stray.DeadLetteredHealthy)
	require.Contains(t, stray.failure(), "dead letter x")
}

func TestTally(t *testing.T) {
	t.Parallel()
	events := []event{{ID: "a", Account: 1, Amount: 10}, {ID: "b", Account: 1, Amount: 5}, {ID: "c", Account: 2, Amount: 7}}
	res := &Result{DuplicatesSkipped: 4}
	tally(events, map[string]int{"a": 1, "b": 3}, map[int]int64{1: 20, 2: 0, 3: 1}, nil, res)
	require.Equal(t, 2, res.DoubleApplied)
	require.Equal(t, 1, res.Lost)
	require.Equal(t, 3, res.BalancesWrong, "account 1 is 20 not 15, account 2 is 0 not 7, account 3 should not move")
	require.Equal(t, 6, res.DuplicatesDelivered)

	clean := &Result{}
	tally(events, map[string]int{"a": 1, "b": 1, "c": 1}, map[int]int64{1: 15, 2: 7}, nil, clean)
	require.Zero(t, clean.DoubleApplied+clean.Lost+clean.BalancesWrong)
}

func TestSchedule(t *testing.T) {
	t.Parallel()
	events := make([]event, 100)
	twice := 0
	for i := range events {
		events[i] = event{ID: fmt.Sprint(i), Twice: i%7 == 0}
		if events[i].Twice {
			twice++
		}
	}
	sends := schedule(events, time.Second, 42)
	require.Len(t, sends, len(events)+twice)
	first := map[string]int{}
	for i, s := range sends {
		if j, ok := first[s.e.ID]; ok {
			require.GreaterOrEqual(t, i, j, "a copy never precedes its original")
			continue
		}
		first[s.e.ID] = i
		if i > 0 {
			require.GreaterOrEqual(t, s.at, sends[i-1].at)
		}
	}
	require.Len(t, first, len(events))
}

// The negative control: consumers whose store reports every claim as new
// apply the duplicates again, and the check must say so.
func TestChaosCatchesDoubleApplies(t *testing.T) {
	res := run(t, Config{Transport: "sqs", Duration: 10 * time.Second, Events: 400, Duplicates: 0.2, ControlNoSkip: true})
	require.False(t, res.OK)
	require.Positive(t, res.DoubleApplied)
	require.Positive(t, res.BalancesWrong)
}

// The Kafka run does the same over kfake, with offset-commit errors as
// the broker faults.
// The same with pipelined handlers: batches go to the store as whole
// transactions in one round trip.
func TestChaosKafkaPipelined(t *testing.T) {
	res := run(t, Config{Transport: "kafka", Duration: 30 * time.Second, Events: 1500, Pipelined: true})
	requireExactlyOnce(t, res)
}

func TestChaosKafka(t *testing.T) {
	res := run(t, Config{Transport: "kafka", Duration: 30 * time.Second, Events: 1500})
	requireExactlyOnce(t, res)
}

func TestAccountsOf(t *testing.T) {
	t.Parallel()
	msg := func(body string) inbox.Message { return inbox.Message{Payload: []byte(body)} }
	for _, tc := range []struct {
		name string
		msgs []inbox.Message
		want []int
	}{
		{"none", nil, []int{}},
		{"sorted and distinct", []inbox.Message{msg(`{"account":7}`), msg(`{"account":3}`), msg(`{"account":7}`), msg(`{"account":1}`)}, []int{1, 3, 7}},
		{"unparsable payloads are left to the handler", []inbox.Message{msg(`{"account":2}`), msg(`not json`)}, []int{2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, accountsOf(tc.msgs))
		})
	}
}

// The drain lasts the run's duration, and never less than the transport
// needs to deliver again what killed consumers held.
func TestDrainTimeout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		transport string
		duration  time.Duration
		want      time.Duration
	}{
		{"sqs", 20 * time.Second, 20 * time.Second},
		{"sqs", 5 * time.Second, drainRedeliveries * (sqsVisibility + sqsWait)},
		{"kafka", 5 * time.Second, drainRedeliveries * (kafkaSession + kafkaRebalanceTimeout)},
		{"kafka", time.Minute, time.Minute},
		{"nats", 5 * time.Second, drainRedeliveries * (natsAckWait + time.Second)},
		{"rabbitmq", 5 * time.Second, drainRedeliveries * (maxRetryBackoff + time.Second)},
	} {
		require.Equal(t, tc.want, drainTimeout(&Config{Transport: tc.transport, Duration: tc.duration}), "%s, %v", tc.transport, tc.duration)
	}
}

// The JSON form of a Result is the contract of 'inboxlab chaos --json': these
// names do not change, and a failed run says how to replay it and why.
func TestResultJSON(t *testing.T) {
	t.Parallel()
	failed := &Result{Transport: "sqs", Store: "postgres", Events: 10, InboxRows: 8, Lost: 2, BalancesWrong: 1, Seed: 303,
		Problems: []string{"consumers did not drain within 20s"}}
	failed.Reason = failed.failure()
	failed.OK = failed.Reason == ""
	b, err := json.Marshal(failed)
	require.NoError(t, err)
	var fields map[string]any
	require.NoError(t, json.Unmarshal(b, &fields))
	names := make([]string, 0, len(fields))
	for name := range fields {
		names = append(names, name)
	}
	require.ElementsMatch(t, []string{
		"transport", "store", "events", "kills", "restarts", "db_kills", "duplicates_delivered",
		"duplicates_skipped", "double_applied", "lost", "ok", "seed", "reason",
		"crash_poison_sent", "crash_poison_dead_lettered", "db_faults", "dead_lettered_healthy", "failovers",
	}, names)
	require.Equal(t, false, fields["ok"])
	require.Equal(t, float64(303), fields["seed"])
	require.Equal(t, "consumers did not drain within 20s; 2 events lost; 1 balances wrong; the inbox holds 8 rows for 10 events", fields["reason"])

	ok := &Result{Events: 10, InboxRows: 10, Seed: 1}
	require.Empty(t, ok.failure())
	b, err = json.Marshal(ok)
	require.NoError(t, err)
	require.NotContains(t, string(b), `"reason"`, "an OK run has no reason")
	require.Contains(t, string(b), `"seed":1`)
}

// TestChaosFailoverSync fails a synchronous cluster of the run's own over
// mid-run: the link cut, the primary killed with SIGKILL, the replica
// promoted. The consumers find the new primary through the multi-host URL,
// and nothing acknowledged is lost.
func TestChaosFailoverSync(t *testing.T) {
	cfg := Config{Transport: "kafka", Duration: 12 * time.Second, Events: 1200, Failover: FailoverSync,
		Command: consumerCommand, Log: logWriter{t}}
	ctx, cancel := context.WithTimeout(context.Background(), 3*cfg.Duration+2*time.Minute)
	defer cancel()
	res, err := Run(ctx, cfg)
	if err != nil && strings.Contains(err.Error(), "pgcluster") {
		testdb.Require(t, "a Postgres cluster of our own", err)
	}
	require.NoError(t, err)
	t.Logf("result: %+v", *res)
	require.True(t, res.OK, "problems: %v", res.Problems)
	require.Equal(t, 1, res.Failovers)
	require.Zero(t, res.Lost)
	require.Zero(t, res.DoubleApplied)
	require.Zero(t, res.BalancesWrong)
	require.Empty(t, res.Cause)
}

// An asynchronous failover that lost events names the cause, in the
// reason too.
func TestFailoverCause(t *testing.T) {
	t.Parallel()
	require.Empty(t, failoverCause(FailoverAsync, 0))
	res := &Result{Events: 10, InboxRows: 8, Lost: 2, Cause: failoverCause(FailoverAsync, 2)}
	require.Contains(t, res.Cause, "replication was asynchronous")
	require.Contains(t, res.failure(), "2 events lost; acknowledged messages lost on failover: replication was asynchronous")
	require.Error(t, (&Config{Failover: "semi", Transport: "kafka", Consumers: 1, Events: 10, Accounts: 1, Duration: 5 * time.Second,
		Command: consumerCommand}).validate())
}

func TestResultFailureShowsFewProblems(t *testing.T) {
	t.Parallel()
	res := &Result{Events: 1, InboxRows: 1, Problems: []string{"a", "b", "c", "d", "e"}}
	require.Equal(t, "a; b; c; 2 more problems", res.failure())
}
