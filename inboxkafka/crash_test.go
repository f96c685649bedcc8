package inboxkafka_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/txinbox/inbox/inboxtype"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxkafka"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/internal/fault"
	"github.com/txinbox/inbox/internal/require"
)

// The crash tests kill a real consumer process. The test binary starts
// itself again with childEnv set; TestMain then runs runCrashChild instead
// of the tests. The child consumes the test's topic, in the test's group,
// into the test's schema, with a fault hook that sends the child SIGKILL on
// the n-th time a named fault point is reached. A SIGKILLed process commits
// nothing more: no offset, no transaction (Postgres rolls back a
// transaction whose connection dies), and it never leaves the group, so its
// partitions move only when its session times out. The test then runs a
// surviving consumer in process and checks that every event was applied
// exactly once.
const childEnv = "INBOXKAFKA_CRASH_CHILD"

// Environment of the child.
const (
	childSeeds    = "INBOXKAFKA_CHILD_SEEDS"
	childTopic    = "INBOXKAFKA_CHILD_TOPIC"
	childGroup    = "INBOXKAFKA_CHILD_GROUP"
	childProtocol = "INBOXKAFKA_CHILD_PROTOCOL"
	childSession  = "INBOXKAFKA_CHILD_SESSION"
	childDB       = "INBOXKAFKA_CHILD_DATABASE_URL"
	childSchema   = "INBOXKAFKA_CHILD_SCHEMA"
	childPoint    = "INBOXKAFKA_CHILD_POINT"
	childHit      = "INBOXKAFKA_CHILD_HIT"
	// childPoison is an event id whose handler kills the child, every
	// time, without returning an error.
	childPoison = "INBOXKAFKA_CHILD_POISON"
)

// Lines the child prints.
const (
	effectLine = "EFFECT "
	crashLine  = "CRASH "
)

// TestCrashAfterDatabaseCommitBeforeOffsetCommit is case (a): a consumer
// dies after its transaction committed and before the offset commit. The
// records come again to the next consumer, which finds them duplicates.
func TestCrashAfterDatabaseCommitBeforeOffsetCommit(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto protocol) {
		e := newEnv(t, proto, envOpts{partitions: 3, session: 2 * time.Second})
		evs := events(300, 9)
		e.produce(evs)

		// The client reaches AfterCommitBeforeAck after each commit,
		// and the consumer again just before it marks the offsets.
		e.crashChild(fault.AfterCommitBeforeAck, 5)
		before := e.effectCounts()
		require.NotEmpty(t, before, "the child died before committing anything")
		require.Less(t, len(before), len(evs), "the child applied everything before dying")

		var tl tally
		cfg := consumerConfig()
		cfg.OnResult = tl.observe
		r := e.start("survivor", cfg, e.handler())
		e.waitApplied(len(evs), 2*time.Minute)
		e.waitCommittedToEnd(time.Minute)
		r.stop(t)

		e.requireExactlyOnce(ids(evs))
		require.Positive(t, tl.duplicates.Load(), "the survivor was not redelivered what the child had committed but not acknowledged")
		for _, id := range tl.dupIDs {
			require.Equal(t, 1, before[id], "duplicate %s was not applied before the crash", id)
		}
		require.EqualValues(t, len(evs)-len(before), tl.applied.Load(), "the survivor applied an event the child had applied")
		t.Logf("child applied %d events before dying; the survivor skipped %d redelivered ones and applied %d",
			len(before), tl.duplicates.Load(), tl.applied.Load())
	})
}

// TestCrashAfterEffectBeforeDatabaseCommit is case (b): a consumer dies
// after its handler's side effect and before the transaction commits. The
// transaction rolls back with the process, and the next consumer applies
// the effect once.
func TestCrashAfterEffectBeforeDatabaseCommit(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto protocol) {
		e := newEnv(t, proto, envOpts{partitions: 3, session: 2 * time.Second})
		evs := events(300, 9)
		e.produce(evs)

		out := e.crashChild(fault.AfterEffectBeforeCommit, 3)
		before := e.effectCounts()
		var rolledBack []string
		for _, id := range linesWith(out, effectLine) {
			if before[id] == 0 {
				rolledBack = append(rolledBack, id)
			}
		}
		require.NotEmpty(t, rolledBack, "no effect of the child was rolled back by its death")

		var tl tally
		cfg := consumerConfig()
		cfg.OnResult = tl.observe
		r := e.start("survivor", cfg, e.handler())
		e.waitApplied(len(evs), 2*time.Minute)
		e.waitCommittedToEnd(time.Minute)
		r.stop(t)

		e.requireExactlyOnce(ids(evs))
		tl.mu.Lock()
		applied := tl.appliedIDs
		tl.mu.Unlock()
		for _, id := range rolledBack {
			require.Contains(t, applied, id, "the survivor did not apply %s, whose effect died with the child", id)
		}
		t.Logf("the child's death rolled back %d effects; the survivor applied them once", len(rolledBack))
	})
}

// TestCrashPoisonIsDeadLettered is issue 23's case: a record whose handler
// takes the whole process down (here it SIGKILLs its own process) would
// crash every consumer that takes the partition, forever, since no error
// ever counts an attempt. With the takeover ledger, once the record has
// been first after MaxCrashes takeovers that found the owner before gone
// down, the next consumer dead-letters it without running its handler, and
// the records after it in the same partition are applied once.
func TestCrashPoisonIsDeadLettered(t *testing.T) {
	proto := protocols[0]
	e := newEnv(t, proto, envOpts{partitions: 1, session: 2 * time.Second})
	evs := events(60, 6)
	poison := evs[25].id
	e.produce(evs)

	deadLettered := func() (*inboxtype.DeadLetter, error) {
		dls, err := e.client.ListDeadLetters(context.Background(), inbox.ListDeadLettersParams{Consumer: "billing", Limit: 10})
		if err != nil || len(dls) == 0 {
			return nil, err
		}
		return dls[0], nil
	}
	var crashes int
	for {
		dl, err := deadLettered()
		require.NoError(t, err)
		if dl != nil {
			break
		}
		require.Less(t, crashes, 3*inboxkafka.DefaultMaxCrashes+4, "the poison record was not dead-lettered after %d crashes", crashes)
		if e.poisonChild(poison, func() bool { dl, err := deadLettered(); return err == nil && dl != nil }) {
			crashes++
		}
	}
	dl, err := deadLettered()
	require.NoError(t, err)
	require.Equal(t, inbox.ReasonCrashedConsumer, dl.Reason)
	require.Equal(t, poison, dl.MessageID)
	require.Equal(t, inboxkafka.DefaultMaxCrashes, dl.Attempts, "the dead letter carries how many takeovers the record crashed")
	require.GreaterOrEqual(t, crashes, inboxkafka.DefaultMaxCrashes)

	var tl tally
	cfg := consumerConfig()
	cfg.OnResult = tl.observe
	r := e.start("survivor", cfg, e.handler())
	healthy := make([]string, 0, len(evs)-1)
	for _, id := range ids(evs) {
		if id != poison {
			healthy = append(healthy, id)
		}
	}
	e.waitApplied(len(healthy), 2*time.Minute)
	e.waitCommittedToEnd(time.Minute)
	r.stop(t)
	e.requireExactlyOnce(healthy)
	require.Zero(t, e.effectCounts()[poison], "the poison record was applied")
	t.Logf("the poison record crashed %d consumers and was dead-lettered; %d healthy records applied once", crashes, len(healthy))
}

// poisonChild runs a child whose handler kills it on the record with id
// poison. It returns true when the child died of its SIGKILL, and false when
// done reported true first (the child got past the record), after killing
// the child.
func (e *env) poisonChild(poison string, done func() bool) bool {
	e.t.Helper()
	cmd := e.child(context.Background(), "", 0)
	cmd.Env = append(cmd.Env, childPoison+"="+poison)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	require.NoError(e.t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(2 * time.Minute)
	for {
		select {
		case err := <-exited:
			text := out.String()
			require.NotContains(e.t, text, "WARNING: DATA RACE", "the child found a data race")
			require.Contains(e.t, text, crashLine+"poison", "the child did not die on the poison record: %v\n%s", err, text)
			e.waitChildGone()
			return true
		case <-tick.C:
			if done() {
				_ = cmd.Process.Kill()
				<-exited
				e.waitChildGone()
				return false
			}
		case <-deadline:
			_ = cmd.Process.Kill()
			<-exited
			e.t.Fatalf("the child neither died nor got past the poison record within 2m:\n%s", out.String())
		}
	}
}

// child returns the command of a child consumer of the test's topic, with a
// fault hook that kills it at the hit-th time point is reached, if point is
// set. ctx kills it.
func (e *env) child(ctx context.Context, point fault.Point, hit int) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0])
	cmd.Env = append(os.Environ(),
		childEnv+"=1",
		childSeeds+"="+strings.Join(e.seeds, ","),
		childTopic+"="+e.topic,
		childGroup+"="+e.group,
		childProtocol+"="+e.proto.name,
		childSession+"="+e.session.String(),
		childDB+"="+e.url,
		childSchema+"="+e.schema,
		childPoint+"="+string(point),
		childHit+"="+strconv.Itoa(hit),
	)
	return cmd
}

// crashChild runs the child until it kills itself at the hit-th time point
// is reached, and returns its output.
func (e *env) crashChild(point fault.Point, hit int) string {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := e.child(ctx, point, hit)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	text := out.String()
	require.NotContains(e.t, text, "WARNING: DATA RACE", "the child found a data race")
	require.Contains(e.t, text, crashLine+string(point), "the child did not reach %s %d times: %v\n%s", point, hit, err, text)
	var ee *exec.ExitError
	require.ErrorAs(e.t, err, &ee, "the child did not die:\n%s", text)
	ws, ok := ee.Sys().(syscall.WaitStatus)
	require.True(e.t, ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL, "the child was not killed: %v\n%s", err, text)
	e.waitChildGone()
	return text
}

// childAppName is the application_name of the child's connections.
func childAppName(schema string) string { return "inboxkafka-child-" + schema }

// waitChildGone waits until Postgres has ended the dead child's sessions:
// until then, a COMMIT the child sent just before it died may still land.
func (e *env) waitChildGone() {
	e.t.Helper()
	waitFor(e.t, time.Minute, "the dead child's database sessions to end", func() (bool, error) {
		var n int
		err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, childAppName(e.schema)).Scan(&n)
		return n == 0, err
	})
}

func linesWith(out, prefix string) []string {
	var vs []string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			vs = append(vs, v)
		}
	}
	return vs
}

// runCrashChild is the child's main: it consumes until the fault hook kills
// it. It returns an exit code only when that did not happen.
func runCrashChild() int {
	if err := crashChild(); err != nil {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		return 3
	}
	fmt.Fprintln(os.Stderr, "crash child: returned without crashing")
	return 4
}

func crashChild() error {
	hit, err := strconv.Atoi(os.Getenv(childHit))
	if err != nil {
		return err
	}
	session, err := time.ParseDuration(os.Getenv(childSession))
	if err != nil {
		return err
	}
	point := fault.Point(os.Getenv(childPoint))
	proto := protocolNamed(os.Getenv(childProtocol))
	schema := os.Getenv(childSchema)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(os.Getenv(childDB))
	if err != nil {
		return err
	}
	cfg.MaxConns = 4
	cfg.ConnConfig.RuntimeParams["application_name"] = childAppName(schema)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	driver, err := inboxpgx.New(pool, &inboxpgx.Config{Tables: inboxdriver.Tables{Schema: schema}})
	if err != nil {
		return err
	}
	client, err := inbox.NewClient[pgx.Tx](driver, nil)
	if err != nil {
		return err
	}
	effects := pgx.Identifier{schema, "effects"}.Sanitize()
	poison := os.Getenv(childPoison)
	h := inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
		if poison != "" && msg.ID == poison {
			fmt.Println(crashLine + "poison")
			self, _ := os.FindProcess(os.Getpid())
			_ = self.Kill()
			select {}
		}
		if err := effect(ctx, effects, tx, msg); err != nil {
			return err
		}
		fmt.Println(effectLine + msg.ID)
		return nil
	})

	cl, err := kgo.NewClient(consumerOpts(strings.Split(os.Getenv(childSeeds), ","), os.Getenv(childGroup), os.Getenv(childTopic), session, proto)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	c, err := inboxkafka.New(cl, client, h, &inboxkafka.Config{
		Consumer:   "billing",
		Key:        inbox.HeaderKey("event-id"),
		MaxBatch:   10,
		MinBackoff: time.Millisecond,
		MaxBackoff: 20 * time.Millisecond,
	})
	if err != nil {
		return err
	}
	var hits atomic.Int64
	ctx = fault.WithHook(ctx, func(p fault.Point) {
		if point == "" {
			return
		}
		if p != point || hits.Add(1) != int64(hit) {
			return
		}
		fmt.Println(crashLine + string(p))
		self, _ := os.FindProcess(os.Getpid())
		_ = self.Kill() // SIGKILL on Unix: no deferred function runs
		select {}       // a kill cannot be caught; wait for it.
	})
	if err := c.Run(ctx); err != nil {
		return err
	}
	return errors.New("the context ran out first")
}
