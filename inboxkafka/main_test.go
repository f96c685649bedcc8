// The tests of inboxkafka run a real consumer against kfake, franz-go's
// Kafka in process, and the real Postgres store (inboxpgx over a random
// schema from internal/testdb). Each test produces events with producer
// event ids, and its handler writes one row per applied event to an effects
// table in the inbox's transaction; the tests then count the rows per event
// id: every event applied exactly once, none lost, none extra.
//
// The cases of the issue, each under the classic group protocol (kgo's
// cooperative-sticky balancer) and KIP-848:
//
//	(a) TestCrashAfterDatabaseCommitBeforeOffsetCommit
//	(b) TestCrashAfterEffectBeforeDatabaseCommit
//	(c) TestMembersJoinAndLeaveUnderLoad
//	(d) TestOffsetCommitErrors
//	(e) TestSameEventIDOnNewOffsets
//	(f) TestPoisonRecordsAreDeadLettered
//	(g) TestPartitionOrderPreserved
//
// and beside them TestRevokeCommitsBeforeTheRebalance,
// TestShutdownCommitsWhatTheDatabaseCommitted and
// TestUnavailableStoreIsNotPoison.
//
// # Crashes
//
// (a) and (b) kill a real process: the test binary runs itself again as a
// consumer (see childEnv in crash_test.go) whose fault hook sends it
// SIGKILL at the n-th time the client or the consumer reaches the fault
// point. A killed process cannot commit an offset or a transaction, and its
// connections' transactions roll back, as in production. The survivor then
// runs in process.
//
// # Synchronisation and leaks
//
// No test sleeps to wait: each polls a condition (rows in the database,
// committed offsets, results reported through Config.OnResult) with a
// deadline. TestMain checks with goleak that no goroutine outlives the
// tests.
package inboxkafka_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxkafka"
	"github.com/txinbox/inbox/inboxmigrate"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/inboxpgx/inboxpgxtest"
	"github.com/txinbox/inbox/inboxtransport"
	"github.com/txinbox/inbox/inboxtransport/transporttest"
	"github.com/txinbox/inbox/inboxtype"
	"github.com/txinbox/inbox/internal/testdb"
	"github.com/txinbox/inbox/internal/uuid"
)

// TestMain stops the test database and then checks that no test left a
// goroutine behind: no consumer worker, committer, kgo client or kfake
// cluster.
func TestMain(m *testing.M) {
	if code, ok := transporttest.Child(transport); ok {
		os.Exit(code)
	}
	code := m.Run()
	testdb.Stop()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak: goroutines left behind:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// protocol is a consumer group protocol the group tests run under.
type protocol struct {
	name string
	opts []kgo.Opt
}

// protocols are the classic group protocol (kgo's default cooperative-sticky
// balancer) and KIP-848, where the broker assigns.
var protocols = []protocol{
	{name: "classic"},
	{name: "kip848", opts: []kgo.Opt{kgo.ServerSideBalancer()}},
}

// eager is the classic protocol with an eager balancer, which revokes every
// partition at each rebalance. The rebalance tests run under it too.
var eager = protocol{name: "classic-eager", opts: []kgo.Opt{kgo.Balancers(kgo.RangeBalancer())}}

func protocolNamed(name string) protocol {
	for _, p := range append(protocols, eager) {
		if p.name == name {
			return p
		}
	}
	panic("unknown protocol " + name)
}

// forEachProtocol runs f as a parallel subtest per group protocol, and
// under more protocols if given.
func forEachProtocol(t *testing.T, f func(t *testing.T, proto protocol), more ...protocol) {
	t.Helper()
	for _, proto := range append(protocols[:len(protocols):len(protocols)], more...) {
		t.Run(proto.name, func(t *testing.T) {
			t.Parallel()
			f(t, proto)
		})
	}
}

// env is one test's world: a kfake cluster with one topic, a consumer group
// name, and a migrated Postgres schema with an effects table.
type env struct {
	t          testing.TB
	proto      protocol
	cluster    *kfake.Cluster
	seeds      []string
	topic      string
	partitions int
	group      string
	session    time.Duration

	url      string
	schema   string
	pool     *pgxpool.Pool
	client   *inbox.Client[pgx.Tx]
	effects  string
	producer *kgo.Client
}

type envOpts struct {
	partitions int
	// session is the group session timeout: short for the crash tests,
	// whose dead member must expire. Defaults to 10s.
	session time.Duration
	// extraTopics are more topics, of one partition each.
	extraTopics []string
}

func newEnv(t testing.TB, proto protocol, o envOpts) *env {
	t.Helper()
	if o.partitions == 0 {
		o.partitions = 3
	}
	if o.session == 0 {
		o.session = 10 * time.Second
	}
	e := &env{
		t:          t,
		proto:      proto,
		topic:      "orders-" + testdb.RandomSuffix(),
		partitions: o.partitions,
		group:      "group-" + testdb.RandomSuffix(),
		session:    o.session,
	}
	e.url = testdb.URL(t)
	e.pool = inboxpgxtest.Pool(t)
	e.schema = testdb.Schema(t)

	kopts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.SeedTopics(int32(o.partitions), e.topic),
		kfake.GroupMinSessionTimeout(500 * time.Millisecond),
		kfake.BrokerConfigs(map[string]string{
			"group.consumer.heartbeat.interval.ms": "100",
			"group.consumer.session.timeout.ms":    strconv.Itoa(int(o.session.Milliseconds())),
		}),
	}
	if len(o.extraTopics) > 0 {
		kopts = append(kopts, kfake.SeedTopics(1, o.extraTopics...))
	}
	cluster, err := kfake.NewCluster(kopts...)
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	e.cluster = cluster
	e.seeds = cluster.ListenAddrs()

	driver, err := inboxpgx.New(e.pool, &inboxpgx.Config{Tables: inboxdriver.Tables{Schema: e.schema}})
	require.NoError(t, err)
	m, err := inboxmigrate.New(driver)
	require.NoError(t, err)
	_, err = m.Up(context.Background())
	require.NoError(t, err)
	e.client, err = inbox.NewClient[pgx.Tx](driver, nil)
	require.NoError(t, err)
	e.effects = pgx.Identifier{e.schema, "effects"}.Sanitize()
	_, err = e.pool.Exec(context.Background(), `CREATE TABLE `+e.effects+` (
		seq       bigserial PRIMARY KEY,
		consumer  text   NOT NULL,
		event_id  uuid   NOT NULL,
		key       text   NOT NULL,
		n         int    NOT NULL,
		partition int    NOT NULL,
		"offset"  bigint NOT NULL)`)
	require.NoError(t, err)

	e.producer, err = kgo.NewClient(kgo.SeedBrokers(e.seeds...), kgo.DefaultProduceTopic(e.topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	t.Cleanup(e.producer.Close)
	return e
}

// event is a record a test produces. The key decides the partition: key kN
// goes to partition N mod the partition count, so that a key's events stay
// in order on one partition.
type event struct {
	id  string // the event-id header; "" for none
	key string
	n   int // the key's sequence number
	// partition is -1 for the key's partition.
	partition int32
	value     string
}

// events returns count events over keys keys, each key numbered 1, 2, ….
func events(count, keys int) []event {
	seq := make(map[int]int)
	out := make([]event, count)
	for i := range out {
		k := i % keys
		seq[k]++
		out[i] = event{id: uuid.V4(), key: "k" + strconv.Itoa(k), n: seq[k], partition: -1}
	}
	return out
}

func (e *env) partitionOf(ev event) int32 {
	if ev.partition >= 0 {
		return ev.partition
	}
	k, err := strconv.Atoi(ev.key[1:])
	require.NoError(e.t, err)
	return int32(k % e.partitions)
}

// produce writes evs to the topic, in order, and waits for the acks.
func (e *env) produce(evs []event) {
	e.t.Helper()
	recs := make([]*kgo.Record, len(evs))
	for i, ev := range evs {
		r := &kgo.Record{Key: []byte(ev.key), Partition: e.partitionOf(ev), Value: []byte(ev.value)}
		if r.Value == nil {
			r.Value = []byte(`{"n":` + strconv.Itoa(ev.n) + `}`)
		}
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: "n", Value: []byte(strconv.Itoa(ev.n))})
		if ev.id != "" {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: "event-id", Value: []byte(ev.id)})
		}
		recs[i] = r
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(e.t, e.producer.ProduceSync(ctx, recs...).FirstErr())
}

// effect writes one effects row for msg, in the inbox's transaction: it is
// the side effect whose count per event the tests check.
func effect(ctx context.Context, table string, tx pgx.Tx, msg inbox.Message) error {
	n, err := strconv.Atoi(msg.Headers["n"])
	if err != nil {
		return inbox.Permanent(fmt.Errorf("header n: %w", err))
	}
	_, err = tx.Exec(ctx, `INSERT INTO `+table+` (consumer, event_id, key, n, partition, "offset") VALUES ($1, $2, $3, $4, $5, $6)`,
		"billing", msg.ID, string(msg.Source.Key), n, msg.Source.Partition, msg.Source.Offset)
	return err
}

// handler is the tests' handler: it applies effect.
func (e *env) handler() inbox.Handler[pgx.Tx] {
	return inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
		return effect(ctx, e.effects, tx, msg)
	})
}

// clientOpts are the options of a consumer's kgo client.
func (e *env) clientOpts(extra ...kgo.Opt) []kgo.Opt {
	return append(consumerOpts(e.seeds, e.group, e.topic, e.session, e.proto), extra...)
}

// consumerOpts are the options of a consumer's kgo client, short on waits.
func consumerOpts(seeds []string, group, topic string, session time.Duration, proto protocol) []kgo.Opt {
	opts := append(inboxkafka.ClientOpts(),
		kgo.SeedBrokers(seeds...),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100*time.Millisecond),
		kgo.HeartbeatInterval(100*time.Millisecond),
		kgo.SessionTimeout(session),
	)
	return append(opts, proto.opts...)
}

// consumerConfig is the tests' consumer configuration, with fast backoffs.
func consumerConfig() inboxkafka.Config {
	return inboxkafka.Config{
		Consumer: "billing",
		Key:      inbox.HeaderKey("event-id"),
		Settings: inboxtransport.Settings{MaxBatch: 50, RetryBackoff: time.Millisecond, MaxRetryBackoff: 20 * time.Millisecond},
	}
}

// tally counts the results that consumers report.
type tally struct {
	applied, duplicates, failed, deadLettered atomic.Int64

	mu         sync.Mutex
	appliedIDs []string
	dupIDs     []string
	errs       []error
}

func (tl *tally) observe(r inboxkafka.Result) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	switch {
	case r.DeadLettered:
		tl.deadLettered.Add(1)
	case r.Err != nil:
		tl.failed.Add(1)
		tl.errs = append(tl.errs, r.Err)
	case r.Outcome == inbox.Applied:
		tl.applied.Add(1)
		tl.appliedIDs = append(tl.appliedIDs, r.Message.ID)
	case r.Outcome == inbox.Duplicate:
		tl.duplicates.Add(1)
		tl.dupIDs = append(tl.dupIDs, r.Message.ID)
	}
}

func (tl *tally) processed() int64 { return tl.applied.Load() + tl.duplicates.Load() }

// runner is one running consumer.
type runner struct {
	name   string
	cl     *kgo.Client
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

// start runs a consumer in the background; it is stopped on cleanup if the
// test does not stop it.
func (e *env) start(name string, cfg inboxkafka.Config, h inbox.Handler[pgx.Tx], opts ...kgo.Opt) *runner {
	e.t.Helper()
	return e.startCtx(context.Background(), name, cfg, h, opts...)
}

func (e *env) startCtx(ctx context.Context, name string, cfg inboxkafka.Config, h inbox.Handler[pgx.Tx], opts ...kgo.Opt) *runner {
	e.t.Helper()
	cl, err := kgo.NewClient(e.clientOpts(opts...)...)
	require.NoError(e.t, err)
	c, err := inboxkafka.New(cl, e.client, h, &cfg)
	if err != nil {
		cl.Close()
		require.NoError(e.t, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	r := &runner{name: name, cl: cl, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- c.Run(ctx) }()
	e.t.Cleanup(func() { r.stop(e.t) })
	return r
}

// stop cancels the consumer, waits for Run to return nil, and closes its
// client, which leaves the group.
func (r *runner) stop(t testing.TB) {
	t.Helper()
	r.once.Do(func() {
		r.cancel()
		select {
		case err := <-r.done:
			require.NoError(t, err, "consumer %s", r.name)
		case <-time.After(2 * time.Minute):
			t.Errorf("consumer %s: Run did not return within 2m of its context's cancellation", r.name)
		}
		r.cl.Close()
	})
}

var waitFor = transporttest.WaitFor

// appliedCount is how many distinct events have an effect.
func (e *env) appliedCount() (int, error) {
	var n int
	err := e.pool.QueryRow(context.Background(), `SELECT count(DISTINCT event_id) FROM `+e.effects).Scan(&n)
	return n, err
}

// waitApplied waits until n distinct events have an effect.
func (e *env) waitApplied(n int, timeout time.Duration) {
	e.t.Helper()
	waitFor(e.t, timeout, fmt.Sprintf("%d events applied", n), func() (bool, error) {
		got, err := e.appliedCount()
		return got >= n, err
	})
}

// effectCounts returns the number of effects per event id.
func (e *env) effectCounts() map[string]int {
	e.t.Helper()
	rows, err := e.pool.Query(context.Background(), `SELECT event_id::text, count(*) FROM `+e.effects+` GROUP BY event_id`)
	require.NoError(e.t, err)
	counts, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (struct {
		id string
		n  int
	}, error) {
		var v struct {
			id string
			n  int
		}
		err := row.Scan(&v.id, &v.n)
		return v, err
	})
	require.NoError(e.t, err)
	out := make(map[string]int, len(counts))
	for _, c := range counts {
		out[c.id] = c.n
	}
	return out
}

// requireExactlyOnce fails unless every id in want has exactly one effect
// and no other id has any.
func (e *env) requireExactlyOnce(want []string) {
	e.t.Helper()
	counts := e.effectCounts()
	var twice, lost []string
	for _, id := range want {
		switch n := counts[id]; {
		case n == 0:
			lost = append(lost, id)
		case n > 1:
			twice = append(twice, fmt.Sprintf("%s×%d", id, n))
		}
	}
	wantSet := make(map[string]bool, len(want))
	for _, id := range want {
		wantSet[id] = true
	}
	extra := 0
	for id := range counts {
		if !wantSet[id] {
			extra++
		}
	}
	require.Empty(e.t, twice, "events applied more than once")
	require.Empty(e.t, lost, "events never applied")
	require.Zero(e.t, extra, "effects of events that were not produced")
	require.Len(e.t, counts, len(want))
}

func ids(evs []event) []string {
	out := make([]string, 0, len(evs))
	for _, ev := range evs {
		if ev.id != "" {
			out = append(out, ev.id)
		}
	}
	return out
}

// highWatermarks returns the end offset of each partition.
func (e *env) highWatermarks() map[int32]int64 {
	e.t.Helper()
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = e.topic
	for p := range e.partitions {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition = int32(p)
		rp.Timestamp = -1 // latest
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(context.Background(), e.producer)
	require.NoError(e.t, err)
	out := make(map[int32]int64)
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			require.NoError(e.t, kerr.ErrorForCode(p.ErrorCode))
			out[p.Partition] = p.Offset
		}
	}
	return out
}

// committed returns the group's committed offset of each partition; a
// partition with none is missing.
func (e *env) committed() map[int32]int64 {
	e.t.Helper()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = e.group
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic = e.topic
	for p := range e.partitions {
		rt.Partitions = append(rt.Partitions, int32(p))
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(context.Background(), e.producer)
	require.NoError(e.t, err)
	out := make(map[int32]int64)
	add := func(partition int32, offset int64, code int16) {
		require.NoError(e.t, kerr.ErrorForCode(code))
		if offset >= 0 {
			out[partition] = offset
		}
	}
	// A group that no member has joined yet has committed nothing.
	if err := kerr.ErrorForCode(resp.ErrorCode); !errors.Is(err, kerr.GroupIDNotFound) {
		require.NoError(e.t, err)
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			add(p.Partition, p.Offset, p.ErrorCode)
		}
	}
	for _, g := range resp.Groups {
		err := kerr.ErrorForCode(g.ErrorCode)
		if errors.Is(err, kerr.GroupIDNotFound) {
			continue
		}
		require.NoError(e.t, err)
		for _, t := range g.Topics {
			for _, p := range t.Partitions {
				add(p.Partition, p.Offset, p.ErrorCode)
			}
		}
	}
	return out
}

// waitCommittedToEnd waits until the group has committed every partition up
// to its end.
func (e *env) waitCommittedToEnd(timeout time.Duration) {
	e.t.Helper()
	end := e.highWatermarks()
	var got map[int32]int64
	waitFor(e.t, timeout, "offsets committed to the end of every partition", func() (bool, error) {
		got = e.committed()
		for p, off := range end {
			if off > 0 && got[p] != off {
				return false, nil
			}
		}
		return true, nil
	})
}

// deadLetters returns the stored dead letters, oldest first.
func (e *env) deadLetters() []*inboxtype.DeadLetter {
	e.t.Helper()
	ds, err := e.client.Admin().DeadLetterList(context.Background(), inboxtype.DeadLetterListParams{Limit: 1000})
	require.NoError(e.t, err)
	sort.Slice(ds, func(i, j int) bool { return ds[i].Offset < ds[j].Offset })
	return ds
}
