package transporttest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxtransport"
	"github.com/txinbox/inbox/internal/fault"
	"github.com/txinbox/inbox/internal/testdb"
	"github.com/txinbox/inbox/outbox"
)

// The crash cases kill a real consumer process. The test binary starts
// itself again with childEnv set; Main then runs the child instead of the
// tests. The child consumes the case's queue (OpenQueue) into the case's
// schema, with a fault hook that kills it (SIGKILL on Unix, which runs no
// deferred function and flushes nothing) the n-th time a named fault point
// is reached: it commits nothing more, acknowledges nothing more, and
// Postgres rolls back the transaction whose connection died. The case then
// runs a surviving consumer in its own process and checks that every event
// was applied exactly once and acknowledged.
const childEnv = "TRANSPORTTEST_CHILD"

// Environment of the child.
const (
	childQueue  = "TRANSPORTTEST_CHILD_QUEUE"
	childURL    = "TRANSPORTTEST_CHILD_DATABASE_URL"
	childSchema = "TRANSPORTTEST_CHILD_SCHEMA"
	childPoint  = "TRANSPORTTEST_CHILD_POINT"
	childHit    = "TRANSPORTTEST_CHILD_HIT"
	// childPoison is an event id whose handler kills the child, every
	// time, without returning an error.
	childPoison = "TRANSPORTTEST_CHILD_POISON"
)

// Lines the child prints.
const (
	effectLine = "EFFECT "
	crashLine  = "CRASH "
)

// Main runs the tests of m, or, in a child process that a crash case
// started, the child consumer of tr. Call it from TestMain. It stops the
// throwaway Postgres cluster, if the tests started one.
func Main[TTx any](m *testing.M, tr Transport[TTx]) {
	if code, ok := Child(tr); ok {
		os.Exit(code)
	}
	testdb.Main(m)
}

// Child runs the child consumer of tr and returns its exit code, with true,
// when this process is a child a crash case started; else it returns
// false at once. Main calls it; a TestMain of its own calls it first.
func Child[TTx any](tr Transport[TTx]) (int, bool) {
	if os.Getenv(childEnv) == "" {
		return 0, false
	}
	return runChild(tr), true
}

func crashCases[TTx any]() []testCase[TTx] {
	return []testCase[TTx]{
		{"crash-after-commit-before-ack", func(t *testing.T, tr Transport[TTx]) { testCrash(t, tr, fault.AfterCommitBeforeAck, 5) }},
		{"crash-after-effect-before-commit", func(t *testing.T, tr Transport[TTx]) { testCrash(t, tr, fault.AfterEffectBeforeCommit, 3) }},
		{"crash-mid-batch", func(t *testing.T, tr Transport[TTx]) { testCrash(t, tr, fault.MidBatch, 4) }},
		{"crash-poison-dead-lettered", testCrashPoison[TTx]},
	}
}

// A message whose handler takes its consumer process down, every time,
// without returning an error, is dead-lettered by a transport that bounds
// such a message (Features.MaxCrashes: the takeover ledger) once it has
// crashed MaxCrashes consumers, without running its handler again, and the
// messages after it are applied once.
func testCrashPoison[TTx any](t *testing.T, tr Transport[TTx]) {
	if !tr.Features.ProcessCrash || tr.Features.MaxCrashes <= 0 {
		t.Skip(tr.Name + " does not bound a message that crashes its consumer: its broker's redrive does")
	}
	e := newEnv(t, tr, QueueOptions{Ordered: true}, nil)
	ids := make([]string, 60)
	msgs := make([]Message, len(ids))
	for i := range ids {
		ids[i] = newID()
		msgs[i] = msg(ids[i], event{N: i})
	}
	poison := ids[25]
	e.publish(msgs...)
	deadLettered := func() bool { return len(e.deadLetters()[poison]) > 0 }
	crashes := 0
	for !deadLettered() {
		require.Less(t, crashes, 3*tr.Features.MaxCrashes+4, "the poison message was not dead-lettered after %d crashes", crashes)
		if e.runChild("", 0, poison, deadLettered) {
			crashes++
		}
	}
	d := e.deadLetters()[poison][0]
	require.Equal(t, inbox.ReasonCrashedConsumer, d.Reason)
	require.Equal(t, tr.Features.MaxCrashes, d.Attempts, "the dead letter carries how many takeovers the message crashed")

	r := e.start(e.handler(), e.settings(), ConsumerOptions[TTx]{Ordered: true}, nil)
	healthy := append(append([]string(nil), ids[:25]...), ids[26:]...)
	e.waitApplied(healthy...)
	e.waitDrained()
	require.NoError(t, r.Stop())
	e.requireExactlyOnce(healthy...)
	e.requireDrained()
	// Every healthy message's record in the takeover ledger was cleared
	// once a consumer got past the message. The poison's may stay: the
	// record of a dead-lettered message is cleared only after the broker
	// settled it, and the case stops the child that dead-lettered it as
	// soon as the dead letter is stored. (A Kafka partition's record stays
	// until the partition's next takeover with records to process.)
	var left int
	require.NoError(t, e.db.QueryRowContext(context.Background(), `SELECT count(*) FROM `+quote(e.schema)+`.`+quote(inboxdriver.DefaultTakeoversTable)+
		` WHERE source NOT LIKE 'kafka:%'`).Scan(&left))
	require.LessOrEqual(t, left, 1, "healthy messages' records left in the takeover ledger")
	t.Logf("the poison message crashed %d consumers and was dead-lettered; %d healthy messages applied once", crashes, len(healthy))
}

// crashEvents is how many events a crash case publishes.
const crashEvents = 200

// A consumer process killed at a fault point, mid-stream, loses nothing
// and doubles nothing: what it committed and did not acknowledge comes back
// to the survivor as duplicates, what it had not committed rolled back and
// is applied by the survivor once.
func testCrash[TTx any](t *testing.T, tr Transport[TTx], point fault.Point, hit int) {
	if !tr.Features.ProcessCrash {
		t.Skip(tr.Name + "'s harness runs no consumer process")
	}
	e := newEnv(t, tr, QueueOptions{}, nil)
	ids := make([]string, crashEvents)
	msgs := make([]Message, crashEvents)
	for i := range ids {
		ids[i] = newID()
		msgs[i] = msg(ids[i], event{N: i})
	}
	e.publish(msgs...)

	out := e.crashChild(point, hit)
	before := e.counts()
	require.NotEmpty(t, linesWith(out, effectLine), "the child applied nothing before it died")
	if point == fault.AfterCommitBeforeAck {
		require.NotEmpty(t, before, "the child committed nothing before it died")
	}
	require.Less(t, len(before), len(ids), "the child applied everything before it died")
	var rolledBack []string
	for _, id := range linesWith(out, effectLine) {
		if before[id] == 0 {
			rolledBack = append(rolledBack, id)
		}
	}
	if point == fault.AfterEffectBeforeCommit {
		require.NotEmpty(t, rolledBack, "no effect of the child was rolled back by its death")
	}

	r := e.start(e.handler(), e.settings(), ConsumerOptions[TTx]{}, nil)
	e.waitApplied(ids...)
	e.waitDrained()
	require.NoError(t, r.Stop())
	e.requireExactlyOnce(ids...)
	e.requireDrained()
	applied, dups, _ := e.results.get()
	require.Equal(t, len(ids)-len(before), applied, "the survivor applied an event the child had committed")
	if point == fault.AfterCommitBeforeAck {
		require.Positive(t, dups, "the survivor was not redelivered what the child had committed and not acknowledged")
	}
	t.Logf("the child committed %d events and rolled back %d before it died at %s; the survivor applied %d and skipped %d",
		len(before), len(rolledBack), point, applied, dups)
}

// crashChild runs a consumer of the case's queue in a child process until
// it kills itself at the hit-th time point is reached, and returns its
// output. The case fails if the child did not die so.
func (e *env[TTx]) crashChild(point fault.Point, hit int) string {
	e.t.Helper()
	var out string
	e.child(point, hit, "", nil, &out)
	return out
}

// runChild runs a child whose handler kills it on the event poison, until
// it dies so (it returns true) or done reports true (it kills the child:
// the child got past the poison event, and it returns false).
func (e *env[TTx]) runChild(point fault.Point, hit int, poison string, done func() bool) bool {
	e.t.Helper()
	var out string
	return e.child(point, hit, poison, done, &out)
}

// child runs a child consumer of the case's queue, armed to die at the
// hit-th time point is reached or on the event poison, until it dies so
// (it returns true) or done, if set, reports true (it kills the child and
// returns false). out receives the child's output.
func (e *env[TTx]) child(point fault.Point, hit int, poison string, done func() bool, out *string) bool {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(),
		childEnv+"=1",
		childQueue+"="+e.q.Name(),
		childURL+"="+childDatabaseURL(e.t, e.url, e.schema),
		childSchema+"="+e.schema,
		childPoint+"="+string(point),
		childHit+"="+strconv.Itoa(hit),
		childPoison+"="+poison,
	)
	var buf syncBuffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	require.NoError(e.t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var err error
	died := false
	for !died {
		select {
		case err = <-exited:
			died = true
		case <-tick.C:
			if done != nil && done() {
				_ = cmd.Process.Kill()
				<-exited
				e.waitChildGone()
				*out = buf.String()
				return false
			}
		}
	}
	text := buf.String()
	*out = text
	require.NotContains(e.t, text, "WARNING: DATA RACE", "the child found a data race")
	what := crashLine + string(point)
	if poison != "" {
		what = crashLine + "poison"
	}
	require.Contains(e.t, text, what, "the child did not die where it should: %v\n%s", err, text)
	var ee *exec.ExitError
	require.ErrorAs(e.t, err, &ee, "the child did not die:\n%s", text)
	e.waitChildGone()
	return true
}

// syncBuffer is a bytes.Buffer that a child's output and the case can use
// at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// childDatabaseURL is the case's database URL with the child's
// application_name, by which waitChildGone finds its sessions.
func childDatabaseURL(t testing.TB, u, schema string) string {
	parsed, err := url.Parse(u)
	require.NoError(t, err)
	q := parsed.Query()
	q.Set("application_name", childAppName(schema))
	parsed.RawQuery = q.Encode()
	return parsed.String()
}

func childAppName(schema string) string { return "transporttest-child-" + schema }

// waitChildGone waits until Postgres has ended the dead child's sessions:
// until then, a COMMIT the child sent just before it died may still land.
func (e *env[TTx]) waitChildGone() {
	e.t.Helper()
	eventually(e.t, "the dead child's database sessions to end", func() (bool, error) {
		var n int
		err := e.db.QueryRowContext(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, childAppName(e.schema)).Scan(&n)
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

// runChild is the child's main: it consumes until the fault hook kills it.
// It returns an exit code only when that did not happen.
func runChild[TTx any](tr Transport[TTx]) int {
	if err := child(tr); err != nil {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		return 3
	}
	fmt.Fprintln(os.Stderr, "crash child: returned without crashing")
	return 4
}

func child[TTx any](tr Transport[TTx]) error {
	hit, err := strconv.Atoi(os.Getenv(childHit))
	if err != nil {
		return err
	}
	point, poison, schema := fault.Point(os.Getenv(childPoint)), os.Getenv(childPoison), os.Getenv(childSchema)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client, closeClient, err := tr.Client(ctx, os.Getenv(childURL), inboxdriver.Tables{Schema: schema}, nil)
	if err != nil {
		return err
	}
	defer closeClient()
	q, err := tr.OpenQueue(os.Getenv(childQueue))
	if err != nil {
		return err
	}
	effects := quote(schema) + `."effects"`
	h := inbox.HandlerFunc[TTx](func(ctx context.Context, tx TTx, m inbox.Message) error {
		if poison != "" && m.ID == poison {
			fmt.Println(crashLine + "poison")
			killSelf()
		}
		if err := tr.Exec(ctx, tx, `INSERT INTO `+effects+` (event_id) VALUES ($1)`, m.ID); err != nil {
			return err
		}
		fmt.Println(effectLine + m.ID)
		return nil
	})
	c, err := q.Consumer(ConsumerOptions[TTx]{
		Client:   client,
		Handler:  h,
		Consumer: ConsumerName,
		Key:      inbox.HeaderKey(outbox.HeaderEventID),
		Settings: inboxtransport.Settings{
			Workers:         2,
			MaxBatch:        10,
			RetryBackoff:    10 * time.Millisecond,
			MaxRetryBackoff: 100 * time.Millisecond,
			ReplayInterval:  -1,
		},
	})
	if err != nil {
		return err
	}
	var hits atomic.Int64
	ctx = fault.WithHook(ctx, func(p fault.Point) {
		if point == "" || p != point || hits.Add(1) != int64(hit) {
			return
		}
		fmt.Println(crashLine + string(p))
		killSelf()
	})
	if err := c.Run(ctx); err != nil {
		return err
	}
	return errors.New("the context ran out first")
}

// killSelf ends the process as a crash does: SIGKILL on Unix
// (os.Process.Kill), which runs no deferred function and flushes nothing.
func killSelf() {
	if self, err := os.FindProcess(os.Getpid()); err == nil {
		_ = self.Kill()
	}
	select {} // a kill cannot be caught; wait for it.
}
