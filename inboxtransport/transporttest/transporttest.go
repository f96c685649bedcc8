// Package transporttest is the conformance suite that every transport
// adapter passes, as package inboxtest is for stores: exactly once under
// redelivery and under a storm of duplicates, acknowledgement only after the
// commit, dead letters for poison and malformed messages (never dropped),
// a store outage that dead-letters no healthy message, order where the
// broker promises it, a graceful shutdown, replays of dead letters, and a
// consumer process killed at each fault point.
//
// An adapter's test builds a harness (Transport: its broker, in process or
// the machine's) and calls Exercise from a test, and Main from TestMain:
//
//	var transport = transporttest.Transport[pgx.Tx]{Name: "nats", NewQueue: newQueue, ...}
//
//	func TestMain(m *testing.M) { transporttest.Main(m, transport) }
//
//	func TestTransport(t *testing.T) { transporttest.Exercise(t, transport) }
//
// Every case runs against a real Postgres (internal/testdb: the server of
// TEST_DATABASE_URL, the machine's by default), in a schema of its own,
// through the inbox client the harness builds for it; the handler records
// each application of an event in an effects table, which the case counts.
// The test binary must register pgx's database/sql driver (import
// github.com/jackc/pgx/v5/stdlib).
package transporttest

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxmigrate"
	"github.com/txinbox/inbox/inboxtransport"
	"github.com/txinbox/inbox/inboxtype"
	"github.com/txinbox/inbox/internal/testdb"
	"github.com/txinbox/inbox/internal/uuid"
	"github.com/txinbox/inbox/outbox"
)

// ConsumerName is the inbox consumer name of the suite's consumers.
const ConsumerName = "billing"

// Features says what a transport does, where brokers differ. Each case
// that needs a feature is skipped without it, and says so.
type Features struct {
	// Ordered: a queue made with QueueOptions.Ordered is processed
	// strictly in order by one consumer at a time, a retried message
	// holding back the ones after it.
	Ordered bool
	// HoldTime is how long the broker keeps a message from other
	// consumers once it delivered it, unless the consumer extends it (a
	// JetStream AckWait, an SQS visibility timeout), as the harness
	// configures it; 0 when the broker holds it for as long as the
	// consumer lives (a Kafka partition, a RabbitMQ channel).
	HoldTime time.Duration
	// ProcessCrash: the harness can run a consumer in a child process
	// (Main), so that the crash cases kill it.
	ProcessCrash bool
	// MaxCrashes is how many consumers a message may take down before the
	// transport dead-letters it (Settings.MaxCrashes, through the takeover
	// ledger), as the harness configures it; 0 when the transport leaves
	// that to the broker's redrive.
	MaxCrashes int
	// Serial: the broker serves one test at a time (goaws keeps its
	// queues in global state): the cases do not run in parallel.
	Serial bool
}

// Transport is a transport adapter under test: its broker, and how to
// make queues on it. TTx is the store's transaction type.
type Transport[TTx any] struct {
	// Name names the transport in the cases' names and logs.
	Name     string
	Features Features
	// NewQueue makes a queue (a topic, a stream and its consumer) that no
	// other test uses, removed when t ends.
	NewQueue func(t testing.TB, opts QueueOptions) Queue[TTx]
	// OpenQueue opens the queue named name (Queue.Name) again, in a child
	// process (Main) that has no *testing.T. Needed with ProcessCrash.
	OpenQueue func(name string) (Queue[TTx], error)
	// Client returns an inbox client over the Postgres database at url,
	// with tables and config, and a function that closes what it opened.
	Client func(ctx context.Context, url string, tables inboxdriver.Tables, config *inbox.Config) (*inbox.Client[TTx], func(), error)
	// Exec runs a statement on the handler's transaction.
	Exec func(ctx context.Context, tx TTx, query string, args ...any) error
}

// QueueOptions choose the kind of queue a case needs.
type QueueOptions struct {
	// Ordered makes a queue the broker delivers in order (Features.Ordered):
	// one partition, a FIFO queue with one group, a JetStream consumer
	// with MaxAckPending 1, a single-active-consumer queue.
	Ordered bool
}

// Message is what a case publishes: an event id ("" for none), in the
// outbox.HeaderEventID header, and a body.
type Message struct {
	ID   string
	Body []byte
}

// Queue is one test's queue on the broker.
type Queue[TTx any] interface {
	// Name names the queue for OpenQueue, in another process.
	Name() string
	// Publish publishes msgs, in order, and returns once the broker has
	// them.
	Publish(ctx context.Context, msgs ...Message) error
	// Consumer returns a consumer of the queue, run by Runner.Run until
	// its context is done; Run closes what the consumer opened before it
	// returns.
	Consumer(opts ConsumerOptions[TTx]) (Runner, error)
	// Depth is how many of the queue's messages the broker holds that
	// were not acknowledged: waiting, or delivered and not acknowledged
	// where the broker can tell (it is exact once no consumer runs).
	Depth(ctx context.Context) (int, error)
}

// ConsumerOptions are what a consumer of a Queue is made with.
type ConsumerOptions[TTx any] struct {
	Client   *inbox.Client[TTx]
	Handler  inbox.Handler[TTx]
	Consumer string
	Key      inbox.KeyFunc
	// Settings are the shared knobs; a harness whose broker has no
	// Workers (Kafka) ignores that one.
	Settings inboxtransport.Settings
	// Ordered: the queue was made Ordered, and the consumer processes it
	// in order.
	Ordered bool
	// ReceiveAhead, when set, turns receiving ahead on or off
	// (inboxtransport.Loop's ReceiveAhead), for Benchmark's comparison;
	// nil keeps the transport's default. A harness whose consumer cannot
	// turn it ignores it.
	ReceiveAhead *bool
}

// Runner runs a consumer.
type Runner interface {
	Run(ctx context.Context) error
}

// wait bounds every wait of a case.
const wait = 2 * time.Minute

// Exercise runs the suite on tr. Cases run in parallel, each with queues
// and a schema of their own.
func Exercise[TTx any](t *testing.T, tr Transport[TTx]) {
	for _, c := range cases[TTx]() {
		t.Run(c.name, func(t *testing.T) {
			if !tr.Features.Serial {
				t.Parallel()
			}
			c.run(t, tr)
		})
	}
}

type testCase[TTx any] struct {
	name string
	run  func(t *testing.T, tr Transport[TTx])
}

func cases[TTx any]() []testCase[TTx] {
	var all []testCase[TTx]
	for _, area := range [][]testCase[TTx]{
		exactlyOnceCases[TTx](), poisonCases[TTx](), orderCases[TTx](), shutdownCases[TTx](),
		replayCases[TTx](), crashCases[TTx](),
	} {
		all = append(all, area...)
	}
	return all
}

// env is one case's world: a queue, a schema with the inbox's tables and
// an effects table, and an inbox client over it.
type env[TTx any] struct {
	t      *testing.T
	tr     Transport[TTx]
	q      Queue[TTx]
	url    string
	schema string
	client *inbox.Client[TTx]
	db     *sql.DB
	// effects is the effects table, quoted and qualified.
	effects string
	// dead counts, per id, the dead letters reported to OnResult.
	results results
}

var databases testdb.Shared[*sql.DB]

// database returns a database/sql pool on the test server, shared by the
// test binary and closed when its tests end.
func database(t testing.TB) *sql.DB {
	return databases.Get(t, func(_ context.Context, u string) (*sql.DB, error) {
		return sql.Open(testdb.PostgresDriver, u)
	}, func(db *sql.DB) { db.Close() })
}

// newEnv makes a case's world with a queue of opts, and a client of
// config (nil for the default).
func newEnv[TTx any](t *testing.T, tr Transport[TTx], opts QueueOptions, config *inbox.Config) *env[TTx] {
	t.Helper()
	e := &env[TTx]{t: t, tr: tr, db: database(t)}
	e.schema = testdb.Schema(t)
	e.url = testdb.URL(t)
	e.effects = quote(e.schema) + `."effects"`
	testdb.Exec(t, `CREATE TABLE `+e.effects+` (
  seq      bigserial PRIMARY KEY,
  event_id uuid NOT NULL,
  n        int  NOT NULL DEFAULT 0
)`)
	e.client = e.newClient(config)
	migrate(t, e.client)
	e.q = tr.NewQueue(t, opts)
	return e
}

// newClient returns another client over the case's store, with config.
func (e *env[TTx]) newClient(config *inbox.Config) *inbox.Client[TTx] {
	e.t.Helper()
	c, closeClient, err := e.tr.Client(context.Background(), e.url, inboxdriver.Tables{Schema: e.schema}, config)
	require.NoError(e.t, err)
	e.t.Cleanup(closeClient)
	return c
}

// migrate migrates the store of client: its driver must be an
// inboxmigrate.Store, as the drivers of this module are.
func migrate[TTx any](t testing.TB, client *inbox.Client[TTx]) {
	t.Helper()
	store, ok := client.Driver().(inboxmigrate.Store)
	require.True(t, ok, "the driver %T cannot be migrated by inboxmigrate", client.Driver())
	m, err := inboxmigrate.New(store)
	require.NoError(t, err)
	_, err = m.Up(context.Background())
	require.NoError(t, err)
}

func quote(name string) string { return `"` + strings.ReplaceAll(name, `"`, `""`) + `"` }

// event is the body of the suite's messages.
type event struct {
	N int `json:"n"`
	// Fail names how the handler fails the event: "permanent",
	// "retryable" (always), "once" (its first try only), "unavailable"
	// (its first three tries, as a dependency that is down),
	// "unavailable-then-retryable" (then always), "permanent-once"
	// (permanently, on its first try only), "slow" (blocks until the case
	// lets it go).
	Fail string `json:"fail,omitempty"`
}

// msg returns a message of event e with id.
func msg(id string, e event) Message {
	b, err := json.Marshal(e)
	if err != nil {
		panic(err)
	}
	return Message{ID: id, Body: b}
}

// newID returns a new event id.
func newID() string { return uuid.V7(time.Now()) }

// publish publishes msgs, failing the case on error.
func (e *env[TTx]) publish(msgs ...Message) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	require.NoError(e.t, e.q.Publish(ctx, msgs...))
}

// handler is the suite's handler: it records one application of each
// event, then fails as its event says; tries counts its calls per id.
type handler[TTx any] struct {
	e     *env[TTx]
	mu    sync.Mutex
	tries map[string]int
	// release lets the "slow" events go.
	release chan struct{}
	started chan struct{}
	once    sync.Once
}

func (e *env[TTx]) handler() *handler[TTx] {
	return &handler[TTx]{e: e, tries: map[string]int{}, release: make(chan struct{}), started: make(chan struct{})}
}

// Handle implements inbox.Handler.
func (h *handler[TTx]) Handle(ctx context.Context, tx TTx, m inbox.Message) error {
	var ev event
	if err := json.Unmarshal(m.Payload, &ev); err != nil {
		return inbox.Permanent(err)
	}
	h.mu.Lock()
	h.tries[m.ID]++
	n := h.tries[m.ID]
	h.mu.Unlock()
	if ev.Fail == "slow" {
		h.once.Do(func() { close(h.started) })
		select {
		case <-h.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := h.e.tr.Exec(ctx, tx, `INSERT INTO `+h.e.effects+` (event_id, n) VALUES ($1, $2)`, m.ID, ev.N); err != nil {
		return err
	}
	switch {
	case ev.Fail == "permanent":
		return inbox.Permanent(fmt.Errorf("event %d: the amount is negative", ev.N))
	case ev.Fail == "retryable":
		return fmt.Errorf("event %d: the ledger says no", ev.N)
	case ev.Fail == "once" && n == 1:
		return fmt.Errorf("event %d: try again", ev.N)
	case (ev.Fail == "unavailable" || ev.Fail == "unavailable-then-retryable") && n <= 3:
		return inbox.Unavailable(fmt.Errorf("event %d: ledger service: connection refused", ev.N))
	case ev.Fail == "unavailable-then-retryable":
		return fmt.Errorf("event %d: the amount is not a number", ev.N)
	case ev.Fail == "permanent-once" && n == 1:
		return inbox.Permanent(fmt.Errorf("event %d: the account is frozen", ev.N))
	}
	return nil
}

// tried is how many times the handler ran for id.
func (h *handler[TTx]) tried(id string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.tries[id]
}

// results tallies what OnResult reported.
type results struct {
	mu         sync.Mutex
	applied    int
	duplicates int
	dead       int
}

func (r *results) observe(res inboxtransport.Result) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case res.DeadLettered:
		r.dead++
	case res.Err == nil && res.Outcome == inbox.Applied:
		r.applied++
	case res.Err == nil && res.Outcome == inbox.Duplicate:
		r.duplicates++
	}
}

func (r *results) get() (applied, duplicates, dead int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.applied, r.duplicates, r.dead
}

// settings are the suite's consumer settings: quick retries, a bounded
// shutdown, replays at once, results counted, logs to the test.
func (e *env[TTx]) settings() inboxtransport.Settings {
	return inboxtransport.Settings{
		Workers:         2,
		MaxBatch:        10,
		MaxDeliveries:   3,
		RetryBackoff:    50 * time.Millisecond,
		MaxRetryBackoff: 200 * time.Millisecond,
		ShutdownTimeout: 10 * time.Second,
		ReplayInterval:  100 * time.Millisecond,
		OnResult:        e.results.observe,
		Logger:          slog.New(slog.NewTextHandler(testWriter{e.t}, &slog.HandlerOptions{Level: slog.LevelInfo})),
	}
}

// start runs a consumer of the case's queue with h, s and opts, on a
// context wrapped by wrap, if set (to arm fault hooks). It is stopped when
// the case ends, if the case did not stop it.
func (e *env[TTx]) start(h inbox.Handler[TTx], s inboxtransport.Settings, opts ConsumerOptions[TTx], wrap func(context.Context) context.Context) *Running {
	e.t.Helper()
	opts.Handler, opts.Settings = h, s
	if opts.Client == nil {
		opts.Client = e.client
	}
	if opts.Consumer == "" {
		opts.Consumer = ConsumerName
	}
	if opts.Key == nil {
		opts.Key = inbox.HeaderKey(outbox.HeaderEventID)
	}
	c, err := e.q.Consumer(opts)
	require.NoError(e.t, err)
	ctx := context.Background()
	if wrap != nil {
		ctx = wrap(ctx)
	}
	return Start(e.t, ctx, c.Run, nil)
}

// counts returns the effect rows per event id.
func (e *env[TTx]) counts() map[string]int {
	e.t.Helper()
	rows, err := e.db.QueryContext(context.Background(), `SELECT event_id::text, count(*) FROM `+e.effects+` GROUP BY event_id`)
	require.NoError(e.t, err)
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		require.NoError(e.t, rows.Scan(&id, &n))
		out[id] = n
	}
	require.NoError(e.t, rows.Err())
	return out
}

// order returns the n of every effect row, in the order they committed.
func (e *env[TTx]) order() []int {
	e.t.Helper()
	rows, err := e.db.QueryContext(context.Background(), `SELECT n FROM `+e.effects+` ORDER BY seq`)
	require.NoError(e.t, err)
	defer rows.Close()
	var out []int
	for rows.Next() {
		var n int
		require.NoError(e.t, rows.Scan(&n))
		out = append(out, n)
	}
	require.NoError(e.t, rows.Err())
	return out
}

// waitApplied waits until every one of ids has an effect row.
func (e *env[TTx]) waitApplied(ids ...string) {
	e.t.Helper()
	eventually(e.t, fmt.Sprintf("%d events applied", len(ids)), func() (bool, error) {
		c := e.counts()
		for _, id := range ids {
			if c[id] == 0 {
				return false, nil
			}
		}
		return true, nil
	})
}

// requireExactlyOnce checks that each of ids was applied exactly once,
// and that nothing else was.
func (e *env[TTx]) requireExactlyOnce(ids ...string) {
	e.t.Helper()
	c := e.counts()
	var twice, lost []string
	for _, id := range ids {
		switch c[id] {
		case 0:
			lost = append(lost, id)
		case 1:
		default:
			twice = append(twice, fmt.Sprintf("%s×%d", id, c[id]))
		}
	}
	require.Empty(e.t, twice, "events applied more than once")
	require.Empty(e.t, lost, "events never applied")
	require.Len(e.t, c, len(ids), "effects of events that should have none")
}

// waitDrained waits until the broker holds no unacknowledged message of
// the queue.
func (e *env[TTx]) waitDrained() {
	e.t.Helper()
	eventually(e.t, "every message acknowledged", func() (bool, error) {
		n, err := e.q.Depth(context.Background())
		return n == 0, err
	})
}

// requireDrained checks, once no consumer runs, that the broker holds no
// unacknowledged message of the queue: each was acknowledged, none was
// left behind.
func (e *env[TTx]) requireDrained() {
	e.t.Helper()
	n, err := e.q.Depth(context.Background())
	require.NoError(e.t, err)
	require.Zero(e.t, n, "messages left unacknowledged at the broker")
}

// deadLetters returns the case's dead letters by message id ("" for
// those without one).
func (e *env[TTx]) deadLetters() map[string][]inboxDeadLetter {
	e.t.Helper()
	ds, err := e.client.Admin().DeadLetterList(context.Background(), inboxtype.DeadLetterListParams{Consumer: ConsumerName, Limit: 1000})
	require.NoError(e.t, err)
	out := map[string][]inboxDeadLetter{}
	for _, d := range ds {
		out[d.MessageID] = append(out[d.MessageID], inboxDeadLetter{ID: d.ID, Reason: d.Reason, Attempts: d.Attempts, Error: d.Error})
	}
	return out
}

// inboxDeadLetter is what the cases check of a dead letter.
type inboxDeadLetter struct {
	ID       int64
	Reason   string
	Attempts int
	Error    string
}

// eventually polls cond until it holds, failing t after wait.
func eventually(t testing.TB, what string, cond func() (bool, error)) {
	t.Helper()
	WaitFor(t, wait, what, cond)
}

// waitClosed waits for ch to be closed, failing t after wait.
func waitClosed(t testing.TB, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(wait):
		t.Fatalf("timed out after %v waiting for %s", wait, what)
	}
}

// testWriter writes log lines to the test's log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// counter counts calls; it is safe for concurrent use.
type counter struct{ n atomic.Int64 }

func (c *counter) add()       { c.n.Add(1) }
func (c *counter) get() int64 { return c.n.Load() }
