package inboxkafka_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxkafka"
	"github.com/txinbox/inbox/inboxmigrate"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/internal/dbfault"
	"github.com/txinbox/inbox/internal/require"
	"github.com/txinbox/inbox/internal/testdb"
	"github.com/txinbox/inbox/internal/uuid"
)

// The outage matrix: a stream of outageEvents records with one poison
// record among them, through a consumer that logs in as a role of its own,
// while the database fails in one way per case. Each case ends with every
// healthy record applied exactly once, none dead-lettered, the poison
// record dead-lettered after exactly MaxAttempts attempts, and no offset
// ever committed ahead of the database.
const (
	outageEvents     = 2000
	outagePartitions = 4
	outageAttempts   = 3
	// outageHold is the least time a fault lasts: enough for the paused
	// consumer's CPU to be measured.
	outageHold = time.Second
	// outageFailures is how many of the consumer's transactions a fault
	// must have failed before it ends, unless it lets them through.
	outageFailures = 3
)

// outageCase is one way the database fails.
type outageCase struct {
	name string
	// fault is the database fault; "" for none.
	fault dbfault.Kind
	// progress reports that the fault lets transactions through (some
	// sessions survive it): it then lasts until more records are applied,
	// rather than until transactions fail.
	progress bool
	// poison is the error of the poison record's handler.
	poison error
}

var outageCases = []outageCase{
	{name: "terminate-backends", fault: dbfault.TerminateBackends, progress: true, poison: errors.New("the amount is not a number")},
	{name: "table-lock", fault: dbfault.TableLock, poison: errors.New("the amount is not a number")},
	{name: "revoke-connect", fault: dbfault.RevokeConnect, poison: errors.New("the amount is not a number")},
	{name: "revoke-connect-one-alive", fault: dbfault.RevokeConnectOneAlive, progress: true, poison: errors.New("the amount is not a number")},
	{name: "revoke-insert", fault: dbfault.RevokeInsert, poison: errors.New("the amount is not a number")},
	{name: "read-only", fault: dbfault.ReadOnly, poison: errors.New("the amount is not a number")},
	{name: "poison-eof", poison: fmt.Errorf("decode the body: %w", io.ErrUnexpectedEOF)},
}

// TestOutage runs the outage matrix on inboxkafka. The cases run one after
// another, so that the process CPU each reports while its consumer is
// paused is its own.
func TestOutage(t *testing.T) {
	db := newOutageDB(t)
	t.Run("kafka", func(t *testing.T) {
		for _, oc := range outageCases {
			t.Run(oc.name, func(t *testing.T) { runKafkaOutage(t, db, oc) })
		}
	})
}

// outageDB is the database of the matrix: a database of its own, whose
// CONNECT privilege a case can revoke from its role without touching any
// other role or test.
type outageDB struct {
	name  string
	url   string
	admin *sql.DB       // superuser, for the faults
	pool  *pgxpool.Pool // superuser, for setup and checks
}

func newOutageDB(t *testing.T) *outageDB {
	name, u, admin := testdb.Database(t)
	pool, err := pgxpool.New(context.Background(), u)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return &outageDB{name: name, url: u, admin: admin, pool: pool}
}

// outageStore is one case's store: a fresh schema in the outage database,
// a role with the grants of docs/GRANTS.md, and a client that logs in as
// that role.
type outageStore struct {
	role, schema string
	inbox        string // quoted
	effects      string // quoted
	client       *inbox.Client[pgx.Tx]
	failed       *atomic.Int64 // transactions that failed, not by the message's fault
}

// outageObserver counts the transactions that failed for a reason that was
// not the message's.
type outageObserver struct{ failed *atomic.Int64 }

func (o outageObserver) TxStart(ctx context.Context, _ string, _ []inbox.Message) context.Context {
	return ctx
}
func (o outageObserver) TxEnd(_ context.Context, e *inbox.TxEvent) {
	if f := inbox.Judge(e.Err); f != inbox.FaultNone && !f.Attempt() && f != inbox.FaultPermanent {
		o.failed.Add(1)
	}
}
func (o outageObserver) DeadLettered(context.Context, *inbox.DeadLetterEvent) {}

func newOutageStore(t *testing.T, db *outageDB, effectsDDL string) *outageStore {
	t.Helper()
	ctx := context.Background()
	role, roleURL := testdb.Role(t)
	schema := "outage_" + testdb.RandomSuffix()
	s := &outageStore{
		role:    role,
		schema:  schema,
		inbox:   pgx.Identifier{schema, "inbox"}.Sanitize(),
		effects: pgx.Identifier{schema, "effects"}.Sanitize(),
		failed:  &atomic.Int64{},
	}
	// Registered after the role's cleanup, so run before it: the role's
	// privileges in this database go before the role does.
	t.Cleanup(func() {
		for _, stmt := range []string{`DROP SCHEMA ` + pgx.Identifier{schema}.Sanitize() + ` CASCADE`, `DROP OWNED BY ` + pgx.Identifier{role}.Sanitize()} {
			if _, err := db.pool.Exec(context.Background(), stmt); err != nil {
				t.Errorf("%s: %v", stmt, err)
			}
		}
	})
	tables := inboxdriver.Tables{Schema: schema}
	owner, err := inboxpgx.New(db.pool, &inboxpgx.Config{Tables: tables})
	require.NoError(t, err)
	m, err := inboxmigrate.New(owner)
	require.NoError(t, err)
	_, err = m.Up(ctx)
	require.NoError(t, err)
	r := pgx.Identifier{role}.Sanitize()
	for _, stmt := range []string{
		fmt.Sprintf(effectsDDL, s.effects),
		`GRANT CONNECT ON DATABASE ` + pgx.Identifier{db.name}.Sanitize() + ` TO ` + r,
		`GRANT USAGE ON SCHEMA ` + pgx.Identifier{schema}.Sanitize() + ` TO ` + r,
		`GRANT SELECT, INSERT ON ` + s.inbox + ` TO ` + r,
		`GRANT SELECT, INSERT, UPDATE (reason, error_text, attempts, last_seen_at) ON ` + pgx.Identifier{schema, "inbox_dead_letters"}.Sanitize() + ` TO ` + r,
		`GRANT SELECT, INSERT ON ` + s.effects + ` TO ` + r,
	} {
		_, err := db.pool.Exec(ctx, stmt)
		require.NoError(t, err, stmt)
	}
	u, err := url.Parse(roleURL)
	require.NoError(t, err)
	u.Path = "/" + db.name
	q := u.Query()
	q.Set("pool_max_conns", "4")
	q.Set("connect_timeout", "5")
	u.RawQuery = q.Encode()
	pool, err := pgxpool.New(ctx, u.String())
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	d, err := inboxpgx.New(pool, &inboxpgx.Config{Tables: tables})
	require.NoError(t, err)
	s.client, err = inbox.NewClient(d, &inbox.Config{LockTimeout: 300 * time.Millisecond, Observer: outageObserver{s.failed}})
	require.NoError(t, err)
	return s
}

// start injects the fault of oc, restored when t ends even if the test
// fails first.
func (s *outageStore) start(t *testing.T, db *outageDB, oc outageCase) *dbfault.Fault {
	t.Helper()
	f, err := dbfault.Start(context.Background(), oc.fault, dbfault.Target{
		Admin: db.admin, Database: db.name, Role: s.role, Inbox: s.inbox,
		TerminateEvery: 150 * time.Millisecond,
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		if err := f.Stop(context.Background()); err != nil {
			t.Errorf("restore after %s: %v", oc.fault, err)
		}
	})
	return f
}

// hold keeps the fault until it has done its work (transactions failed, or
// more applied through it) and for at least outageHold, and reports the
// process's CPU meanwhile.
func (s *outageStore) hold(t *testing.T, f *dbfault.Fault, oc outageCase, applied func() (int, error)) {
	t.Helper()
	start := time.Now()
	cpu0, cpuOK := dbfault.ProcessCPU()
	failed0 := s.failed.Load()
	n0, err := applied()
	require.NoError(t, err)
	waitFor(t, 2*time.Minute, string(oc.fault)+" to take effect", func() (bool, error) {
		if time.Since(start) < outageHold {
			return false, nil
		}
		if oc.progress {
			// Some sessions survive the fault: it lasts until it has
			// ended sessions and records went through it.
			n, err := applied()
			return (n >= n0+outageEvents/8 || n == outageEvents-1) && f.Terminated() > 0, err
		}
		return s.failed.Load()-failed0 >= outageFailures, nil
	})
	held := time.Since(start)
	cpu1, _ := dbfault.ProcessCPU()
	n1, err := applied()
	require.NoError(t, err)
	if cpuOK {
		t.Logf("%s held %v: process CPU (consumer and in-process broker) %v, %.1f%% of one core; %d transactions failed not by their messages' fault (%.0f/s); %d applied meanwhile; %d sessions terminated",
			oc.fault, held.Round(time.Millisecond), (cpu1 - cpu0).Round(time.Millisecond), 100*float64(cpu1-cpu0)/float64(held),
			s.failed.Load()-failed0, float64(s.failed.Load()-failed0)/held.Seconds(), n1-n0, f.Terminated())
	}
	require.NoError(t, f.Stop(context.Background()))
}

func (s *outageStore) appliedCount(db *outageDB) func() (int, error) {
	return func() (int, error) {
		var n int
		err := db.pool.QueryRow(context.Background(), `SELECT count(*) FROM `+s.effects).Scan(&n)
		return n, err
	}
}

// requireOutcome checks what every case must end with: each healthy event
// applied exactly once, the poison event dead-lettered after exactly
// maxAttempts attempts, and no other dead letter.
func (s *outageStore) requireOutcome(t *testing.T, db *outageDB, healthy []string, poison string, maxAttempts int) {
	t.Helper()
	rows, err := db.pool.Query(context.Background(), `SELECT event_id::text, count(*) FROM `+s.effects+` GROUP BY event_id`)
	require.NoError(t, err)
	counts := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		require.NoError(t, rows.Scan(&id, &n))
		counts[id] = n
	}
	require.NoError(t, rows.Err())
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
	require.Empty(t, twice, "healthy events applied more than once")
	require.Empty(t, lost, "healthy events never applied")
	require.Len(t, counts, len(healthy), "effects of events that should not have any")

	// Read as the superuser: the role's pool may still hold a session a
	// fault ended.
	owner, err := inboxpgx.New(db.pool, &inboxpgx.Config{Tables: inboxdriver.Tables{Schema: s.schema}})
	require.NoError(t, err)
	ds, err := owner.DeadLetters(context.Background(), &inboxdriver.DeadLetterListParams{Limit: 100})
	require.NoError(t, err)
	healthyDead := 0
	for _, d := range ds {
		if d.MessageID != poison {
			healthyDead++
		}
	}
	require.Zero(t, healthyDead, "healthy events dead-lettered: %d", healthyDead)
	require.Len(t, ds, 1, "the poison event's dead letter")
	require.Equal(t, poison, ds[0].MessageID)
	require.Equal(t, inbox.ReasonMaxAttempts, ds[0].Reason)
	require.Equal(t, maxAttempts, ds[0].Attempts, "the poison event's attempts: %s", ds[0].Error)
}

// outageLogs counts the log records that announce an outage, and passes
// the records from Warn up to the test's output.
type outageLogs struct {
	next  slog.Handler
	count *atomic.Int64
}

func newOutageLogs(t *testing.T) outageLogs {
	return outageLogs{next: slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}), count: &atomic.Int64{}}
}

func (l outageLogs) Enabled(ctx context.Context, level slog.Level) bool {
	return level >= slog.LevelWarn
}
func (l outageLogs) Handle(ctx context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, "inbox: the store is unavailable") || strings.HasPrefix(r.Message, "inbox: claims time out") {
		l.count.Add(1)
	}
	return l.next.Handle(ctx, r)
}
func (l outageLogs) WithAttrs(as []slog.Attr) slog.Handler {
	return outageLogs{next: l.next.WithAttrs(as), count: l.count}
}
func (l outageLogs) WithGroup(name string) slog.Handler {
	return outageLogs{next: l.next.WithGroup(name), count: l.count}
}

// requireLoggedOnce checks that the outage was logged once, not once per
// message: a fault whose sessions flap may end an outage and begin another.
func requireLoggedOnce(t *testing.T, oc outageCase, logs outageLogs) {
	t.Helper()
	n := logs.count.Load()
	t.Logf("%s: the outage was announced %d times", oc.name, n)
	if oc.fault != "" {
		require.Positive(t, n, "the outage was never logged")
	}
	require.LessOrEqual(t, n, int64(3), "an outage is logged once, not per message")
}

// commitGuard checks, as each offset commit reaches the broker and before
// the broker applies it, that every record below each committed offset is
// in the database: applied (its effect row) or dead-lettered.
type commitGuard struct {
	db      *outageDB
	store   *outageStore
	mu      sync.Mutex
	checked int
	ahead   []string
}

func (g *commitGuard) check(req kmsg.Request) {
	r, ok := req.(*kmsg.OffsetCommitRequest)
	if !ok {
		return
	}
	ctx := context.Background()
	// The case's cluster has one topic, which newer requests name by its
	// id only.
	for _, rt := range r.Topics {
		for _, p := range rt.Partitions {
			var n int64
			err := g.db.pool.QueryRow(ctx, `SELECT
   (SELECT count(DISTINCT "offset") FROM `+g.store.effects+` WHERE partition = $1 AND "offset" < $2)
 + (SELECT count(*) FROM `+pgx.Identifier{g.store.schema, "inbox_dead_letters"}.Sanitize()+` WHERE source_partition = $1 AND source_offset < $2)`,
				p.Partition, p.Offset).Scan(&n)
			g.mu.Lock()
			g.checked++
			switch {
			case err != nil:
				g.ahead = append(g.ahead, fmt.Sprintf("partition %d at %d: %v", p.Partition, p.Offset, err))
			case n != p.Offset:
				g.ahead = append(g.ahead, fmt.Sprintf("partition %d committed at %d with only %d records below it in the database", p.Partition, p.Offset, n))
			}
			g.mu.Unlock()
		}
	}
}

func runKafkaOutage(t *testing.T, db *outageDB, oc outageCase) {
	ctx := context.Background()
	s := newOutageStore(t, db, `CREATE TABLE %s (event_id uuid NOT NULL, partition int NOT NULL, "offset" bigint NOT NULL)`)

	topic := "orders-" + testdb.RandomSuffix()
	group := "group-" + testdb.RandomSuffix()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(outagePartitions, topic))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	seeds := cluster.ListenAddrs()
	guard := &commitGuard{db: db, store: s}
	cluster.ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		guard.check(req)
		return nil, nil, false
	})

	// The stream: a first half before the fault, and a second half, with
	// the poison record in its middle, sent once the fault has begun, so
	// that the consumer has work to fail on whatever its speed.
	var healthy []string
	var poison string
	recs := make([]*kgo.Record, outageEvents)
	for i := range recs {
		id := uuid.V4()
		r := &kgo.Record{Topic: topic, Partition: int32(i % outagePartitions), Value: []byte(`{"n":` + strconv.Itoa(i) + `}`),
			Headers: []kgo.RecordHeader{{Key: "event-id", Value: []byte(id)}}}
		if i == outageEvents*3/4 {
			poison = id
			r.Value = []byte("poison")
		} else {
			healthy = append(healthy, id)
		}
		recs[i] = r
	}
	producer, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer producer.Close()
	require.NoError(t, producer.ProduceSync(ctx, recs[:outageEvents/2]...).FirstErr())

	var poisonTries atomic.Int64
	h := inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
		if string(msg.Payload) == "poison" {
			poisonTries.Add(1)
			return oc.poison
		}
		_, err := tx.Exec(ctx, `INSERT INTO `+s.effects+` (event_id, partition, "offset") VALUES ($1, $2, $3)`,
			msg.ID, msg.Source.Partition, msg.Source.Offset)
		return err
	})
	logs := newOutageLogs(t)
	cfg := inboxkafka.Config{
		Logger:      slog.New(logs),
		Consumer:    "billing",
		Key:         inbox.HeaderKey("event-id"),
		MaxBatch:    50,
		MaxAttempts: outageAttempts,
		MinBackoff:  50 * time.Millisecond,
		MaxBackoff:  500 * time.Millisecond,
	}
	cl, err := kgo.NewClient(consumerOpts(seeds, group, topic, 10*time.Second, protocols[0])...)
	require.NoError(t, err)
	c, err := inboxkafka.New(cl, s.client, h, &cfg)
	require.NoError(t, err)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(2 * time.Minute):
			t.Errorf("Run did not return within 2m of its context's cancellation")
		}
		cl.Close()
	}
	t.Cleanup(stop)

	applied := s.appliedCount(db)
	waitFor(t, 2*time.Minute, "the first half of the stream applied", func() (bool, error) {
		n, err := applied()
		return n >= outageEvents/2, err
	})
	var f *dbfault.Fault
	if oc.fault != "" {
		f = s.start(t, db, oc)
	}
	require.NoError(t, producer.ProduceSync(ctx, recs[outageEvents/2:]...).FirstErr())
	if f != nil {
		s.hold(t, f, oc, applied)
	}
	waitFor(t, 2*time.Minute, "every healthy record applied and the poison record dead-lettered", func() (bool, error) {
		n, err := applied()
		if err != nil || n < len(healthy) {
			return false, err
		}
		var dead int
		err = db.pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{s.schema, "inbox_dead_letters"}.Sanitize()).Scan(&dead)
		return dead > 0, err
	})
	e := &env{t: t, producer: producer, topic: topic, partitions: outagePartitions, group: group}
	e.waitCommittedToEnd(2 * time.Minute)
	stop()

	s.requireOutcome(t, db, healthy, poison, outageAttempts)
	requireLoggedOnce(t, oc, logs)
	// A try whose connection the fault broke is not an attempt.
	require.GreaterOrEqual(t, poisonTries.Load(), int64(outageAttempts))
	guard.mu.Lock()
	defer guard.mu.Unlock()
	require.Empty(t, guard.ahead, "offsets committed ahead of the database")
	require.Positive(t, guard.checked)
}
