// Package outagetest is the outage matrix that the tests of every
// transport adapter run: a stream of messages with one poison message,
// through a consumer that logs in as a role of its own, while the database
// fails in one way per case (package dbfault). Each case ends with every
// healthy message applied exactly once, none dead-lettered, the poison
// message dead-lettered after exactly its attempts, and the outage logged
// once; it logs the process's CPU while the consumer is paused.
//
// The package needs only the standard library: it works on the database
// through database/sql, with the driver the test binary registers
// (testdb.PostgresDriver), and each adapter's test builds its own client
// over the role's URL.
package outagetest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxmigrate"
	"github.com/txinbox/inbox/inboxsql"
	"github.com/txinbox/inbox/inboxtype"
	"github.com/txinbox/inbox/internal/dbfault"
	"github.com/txinbox/inbox/internal/testdb"
)

const (
	// Events is the length of the stream, the poison message included.
	Events = 2000
	// hold is the least time a fault lasts: enough for the paused
	// consumer's CPU to be measured.
	hold = time.Second
	// failures is how many of the consumer's transactions a fault must
	// have failed before it ends, unless it lets them through.
	failures = 3
	// wait bounds every wait of a case.
	wait = 2 * time.Minute
)

// Case is one way the database fails.
type Case struct {
	Name string
	// Fault is the database fault; "" for none.
	Fault dbfault.Kind
	// Progress reports that the fault lets transactions through (some
	// sessions survive it): it then lasts until it ended sessions and
	// messages went through it, rather than until transactions failed.
	Progress bool
	// Poison is the error the poison message's handler returns.
	Poison error
}

var poisonErr = errors.New("the amount is not a number")

// Cases are the cases of the matrix.
var Cases = []Case{
	{Name: "terminate-backends", Fault: dbfault.TerminateBackends, Progress: true, Poison: poisonErr},
	{Name: "table-lock", Fault: dbfault.TableLock, Poison: poisonErr},
	{Name: "revoke-connect", Fault: dbfault.RevokeConnect, Poison: poisonErr},
	{Name: "revoke-connect-one-alive", Fault: dbfault.RevokeConnectOneAlive, Progress: true, Poison: poisonErr},
	{Name: "revoke-insert", Fault: dbfault.RevokeInsert, Poison: poisonErr},
	{Name: "read-only", Fault: dbfault.ReadOnly, Poison: poisonErr},
	// A handler's own io.EOF is the message's: the poison message is
	// dead-lettered after its attempts, and its partition or queue goes on.
	{Name: "poison-eof", Poison: fmt.Errorf("decode the body: %w", io.ErrUnexpectedEOF)},
}

// DB is the database of the matrix: a database of its own, whose CONNECT
// privilege a case can revoke from its role without touching any other
// role or test.
type DB struct {
	Name string
	// Admin is a superuser's pool on it.
	Admin *sql.DB
}

// NewDB creates the matrix's database, dropped when t ends.
func NewDB(t *testing.T) *DB {
	name, _, admin := testdb.Database(t)
	return &DB{Name: name, Admin: admin}
}

// Store is one case's store: a fresh schema in the matrix's database, with
// the inbox's tables and an effects table, and a role that holds the
// consumer's grants of docs/GRANTS.md on them.
type Store struct {
	db     *DB
	Role   string
	Schema string
	// Inbox and Effects are the tables, quoted and qualified.
	Inbox, Effects string
	// URL logs in as the role, on the matrix's database.
	URL string
	// Tables are the store's tables, for the adapter's driver.
	Tables inboxdriver.Tables

	owner  *inboxsql.Driver // the superuser's, for the checks
	failed atomic.Int64     // transactions that failed not by their message's fault
	logs   logCounter
}

// pgEngine is just enough of an inboxsql.Engine for the superuser's
// migration and checks: their errors are not classified.
type pgEngine struct{}

func (pgEngine) Dialect() inboxsql.Dialect             { return inboxsql.Postgres }
func (pgEngine) Classify(error) inboxdriver.ErrorClass { return inboxdriver.ClassOther }
func (pgEngine) DuplicateKey(error) bool               { return false }

// exec runs statements as the superuser, failing t on the first error.
func (s *Store) exec(t *testing.T, stmts ...string) {
	t.Helper()
	for _, stmt := range stmts {
		if _, err := s.db.Admin.ExecContext(context.Background(), stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
}

func (s *Store) count(ctx context.Context, query string) (int, error) {
	var n int
	err := s.db.Admin.QueryRowContext(ctx, query).Scan(&n)
	return n, err
}

func quote(name string) string            { return `"` + strings.ReplaceAll(name, `"`, `""`) + `"` }
func qualify(schema, table string) string { return quote(schema) + "." + quote(table) }

// NewStore makes a case's store. effectsDDL creates the effects table
// named by its %s: it needs an event_id uuid column, which the handler
// fills with the message's id.
func NewStore(t *testing.T, db *DB, effectsDDL string) *Store {
	t.Helper()
	role, roleURL := testdb.Role(t)
	schema := "outage_" + testdb.RandomSuffix()
	s := &Store{
		db:      db,
		Role:    role,
		Schema:  schema,
		Inbox:   qualify(schema, "inbox"),
		Effects: qualify(schema, "effects"),
		Tables:  inboxdriver.Tables{Schema: schema},
	}
	s.logs.count = &atomic.Int64{}
	// Registered after the role's cleanup, so run before it: the role's
	// privileges in this database go before the role does.
	t.Cleanup(func() {
		for _, stmt := range []string{`DROP SCHEMA ` + quote(schema) + ` CASCADE`, `DROP OWNED BY ` + quote(role)} {
			if _, err := db.Admin.ExecContext(context.Background(), stmt); err != nil {
				t.Errorf("%s: %v", stmt, err)
			}
		}
	})
	var err error
	s.owner, err = inboxsql.New(db.Admin, pgEngine{}, &inboxsql.Config{Tables: s.Tables})
	require.NoError(t, err)
	m, err := inboxmigrate.New(s.owner)
	require.NoError(t, err)
	_, err = m.Up(context.Background())
	require.NoError(t, err)
	r := quote(role)
	s.exec(t,
		fmt.Sprintf(effectsDDL, s.Effects),
		`GRANT CONNECT ON DATABASE `+quote(db.Name)+` TO `+r,
		`GRANT USAGE ON SCHEMA `+quote(schema)+` TO `+r,
		`GRANT SELECT, INSERT ON `+s.Inbox+` TO `+r,
		`GRANT SELECT, INSERT, UPDATE (reason, error_text, attempts, last_seen_at) ON `+qualify(schema, "inbox_dead_letters")+` TO `+r,
		`GRANT SELECT, INSERT ON `+s.Effects+` TO `+r,
		// inboxkafka's takeover ledger.
		`GRANT SELECT, INSERT, UPDATE, DELETE ON `+qualify(schema, "inbox_takeovers")+` TO `+r,
	)
	u, err := url.Parse(roleURL)
	require.NoError(t, err)
	u.Path = "/" + db.Name
	q := u.Query()
	q.Set("connect_timeout", "5")
	u.RawQuery = q.Encode()
	s.URL = u.String()
	s.logs.next = slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})
	return s
}

// Config is the client configuration of a case: its Observer counts the
// failed transactions, and the lock timeout is short, so that a table lock
// fails claims quickly.
func (s *Store) Config() *inbox.Config {
	return &inbox.Config{LockTimeout: 300 * time.Millisecond, Observer: observer{&s.failed}}
}

// Logger is the consumer's logger: it counts the announcements of an
// outage, and passes records from Warn up to the test's output.
func (s *Store) Logger() *slog.Logger { return slog.New(s.logs) }

// Applied counts the effect rows.
func (s *Store) Applied() (int, error) {
	return s.count(context.Background(), `SELECT count(*) FROM `+s.Effects)
}

// DeadLetters counts the dead letters.
func (s *Store) DeadLetters() (int, error) {
	return s.count(context.Background(), `SELECT count(*) FROM `+qualify(s.Schema, "inbox_dead_letters"))
}

// WaitApplied waits until n effect rows are there.
func (s *Store) WaitApplied(t *testing.T, n int) {
	t.Helper()
	Eventually(t, fmt.Sprintf("%d messages applied", n), func() (bool, error) {
		got, err := s.Applied()
		return got >= n, err
	})
}

// Fault injects c's fault, if any, then calls more (which sends the rest of
// the stream), and keeps the fault until it has done its work and for at
// least a second; then it restores the database. The restore is also
// registered with t.Cleanup, so that it happens even when the test fails
// first.
func (s *Store) Fault(t *testing.T, c Case, more func()) {
	t.Helper()
	if c.Fault == "" {
		more()
		return
	}
	ctx := context.Background()
	f, err := dbfault.Start(ctx, c.Fault, dbfault.Target{
		Admin: s.db.Admin, Database: s.db.Name, Role: s.Role, Inbox: s.Inbox,
		TerminateEvery: 150 * time.Millisecond,
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		if err := f.Stop(context.Background()); err != nil {
			t.Errorf("restore after %s: %v", c.Fault, err)
		}
	})
	start := time.Now()
	cpu0, cpuOK := dbfault.ProcessCPU()
	failed0 := s.failed.Load()
	n0, err := s.Applied()
	require.NoError(t, err)
	more()
	Eventually(t, string(c.Fault)+" to take effect", func() (bool, error) {
		if time.Since(start) < hold {
			return false, nil
		}
		if c.Progress {
			n, err := s.Applied()
			return (n >= n0+Events/20 || n == Events-1) && f.Terminated() > 0, err
		}
		return s.failed.Load()-failed0 >= failures, nil
	})
	held := time.Since(start)
	cpu1, _ := dbfault.ProcessCPU()
	n1, err := s.Applied()
	require.NoError(t, err)
	failed := s.failed.Load() - failed0
	if cpuOK {
		t.Logf("%s held %v: process CPU (consumer and in-process broker) %v, %.1f%% of one core; %d transactions failed, none by their messages' fault (%.0f/s); %d applied meanwhile; %d sessions terminated",
			c.Fault, held.Round(time.Millisecond), (cpu1 - cpu0).Round(time.Millisecond), 100*float64(cpu1-cpu0)/float64(held),
			failed, float64(failed)/held.Seconds(), n1-n0, f.Terminated())
	}
	require.NoError(t, f.Stop(ctx))
}

// RequireOutcome checks what every case must end with: each healthy
// message applied exactly once, the poison message dead-lettered with
// ReasonMaxAttempts after exactly attempts attempts, no other dead letter,
// and the outage logged once.
func (s *Store) RequireOutcome(t *testing.T, c Case, healthy []string, poison string, attempts int) {
	t.Helper()
	ctx := context.Background()
	rows, err := s.db.Admin.QueryContext(ctx, `SELECT event_id::text, count(*) FROM `+s.Effects+` GROUP BY event_id`)
	require.NoError(t, err)
	counts := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		require.NoError(t, rows.Scan(&id, &n))
		counts[id] = n
	}
	require.NoError(t, rows.Err())
	rows.Close()
	var twice, lost []string
	for _, id := range healthy {
		switch counts[id] {
		case 0:
			lost = append(lost, id)
		case 1:
		default:
			twice = append(twice, fmt.Sprintf("%s×%d", id, counts[id]))
		}
	}
	require.Empty(t, twice, "healthy messages applied more than once")
	require.Empty(t, lost, "healthy messages never applied")
	require.Len(t, counts, len(healthy), "effects of messages that should have none")

	ds, err := s.owner.DeadLetterList(ctx, &inboxtype.DeadLetterListParams{Limit: 100})
	require.NoError(t, err)
	healthyDead := 0
	for _, d := range ds {
		if d.MessageID != poison {
			healthyDead++
		}
	}
	t.Logf("%s: dead_lettered_healthy: %d", c.Name, healthyDead)
	require.Zero(t, healthyDead, "healthy messages dead-lettered")
	require.Len(t, ds, 1, "the poison message's dead letter")
	require.Equal(t, poison, ds[0].MessageID)
	require.Equal(t, inbox.ReasonMaxAttempts, ds[0].Reason)
	require.Equal(t, attempts, ds[0].Attempts, "the poison message's attempts: %s", ds[0].Error)

	n := s.logs.count.Load()
	t.Logf("%s: the outage was announced %d times", c.Name, n)
	if c.Fault != "" {
		require.Positive(t, n, "the outage was never logged")
	}
	// A fault whose sessions flap may end an outage and begin another.
	require.LessOrEqual(t, n, int64(3), "an outage is logged once, not per message")
}

// Eventually polls cond until it holds, failing t after two minutes.
func Eventually(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(wait)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, err := cond()
		require.NoError(t, err, what)
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", wait, what)
		}
		<-tick.C
	}
}

// observer counts the transactions that failed for a reason that was not
// their messages'.
type observer struct{ failed *atomic.Int64 }

func (o observer) TxStart(ctx context.Context, _ string, _ []inbox.Message) context.Context {
	return ctx
}
func (o observer) TxEnd(_ context.Context, e *inbox.TxEvent) {
	if f := inbox.Judge(e.Err); f != inbox.FaultNone && !f.Attempt() && f != inbox.FaultPermanent {
		o.failed.Add(1)
	}
}
func (o observer) DeadLettered(context.Context, *inbox.DeadLetterEvent) {}

// logCounter counts the log records that announce an outage, and passes
// the records from Warn up to next.
type logCounter struct {
	next  slog.Handler
	count *atomic.Int64
}

func (l logCounter) Enabled(_ context.Context, level slog.Level) bool { return level >= slog.LevelWarn }
func (l logCounter) Handle(ctx context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, "inbox: the store is unavailable") || strings.HasPrefix(r.Message, "inbox: claims time out") {
		l.count.Add(1)
	}
	return l.next.Handle(ctx, r)
}
func (l logCounter) WithAttrs(as []slog.Attr) slog.Handler {
	return logCounter{next: l.next.WithAttrs(as), count: l.count}
}
func (l logCounter) WithGroup(name string) slog.Handler {
	return logCounter{next: l.next.WithGroup(name), count: l.count}
}

// testWriter writes log lines to the test's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
