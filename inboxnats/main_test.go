// The tests of inboxnats run the adapter against real NATS servers with the
// real Postgres store (inboxpgx over internal/testdb), and count the effect
// rows per event id to check that each event was applied exactly once.
//
//   - The machine's nats-server (TEST_NATS_URL, nats://127.0.0.1:4222 by
//     default; 2.9 here, which predates TermWithReason). Each test makes its
//     own stream, with a random name and subject, and deletes it. Locally a
//     missing server skips these tests; with CI=true it fails them.
//   - An embedded nats-server (github.com/nats-io/nats-server/v2), started
//     in this process on a temporary store directory, where a test must
//     stop and restart the server.
//
// Consumers connect through a loopback TCP proxy (internal/tcpproxy), so
// that a test can cut a consumer's connection, as a network failure would,
// without touching the server the other tests share.
//
// # Simulated crashes
//
// A consumer "crashes" at a fault point (internal/fault's hook) by closing
// its NATS connection for good, from inside the hook, before it can ack:
// its acks are lost, as they would be with its process. A crash before
// commit also terminates the transaction's Postgres backend, so the commit
// fails as it would if the process had died. The message comes back when
// its AckWait runs out and a second consumer gets it. The chaos tests kill
// real processes at the same points.
package inboxnats_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxmigrate"
	"github.com/txinbox/inbox/inboxnats"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/internal/require"
	"github.com/txinbox/inbox/internal/tcpproxy"
	"github.com/txinbox/inbox/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// Test timings. AckWait is short so that redeliveries come quickly; every
// wait on it polls a condition with a deadline.
const (
	testAckWait  = 2 * time.Second
	waitDeadline = 60 * time.Second
)

// machineURL is the machine's NATS server.
func machineURL() string {
	if u := os.Getenv("TEST_NATS_URL"); u != "" {
		return u
	}
	return "nats://127.0.0.1:4222"
}

// server is a NATS server a test talks to: the machine's, or an embedded
// one.
type natsServer struct {
	url  string
	addr string // host:port
	// embedded is the in-process server, nil for the machine's.
	embedded *server.Server
	opts     *server.Options
}

// machineServer returns the machine's server, skipping t when it does not
// answer (failing it in CI).
func machineServer(t *testing.T) *natsServer {
	t.Helper()
	u := machineURL()
	nc, err := nats.Connect(u, nats.Timeout(3*time.Second))
	if err == nil {
		_, err = jetstreamOf(nc).AccountInfo(context.Background())
		nc.Close()
	}
	testdb.Require(t, "NATS with JetStream at "+u, err)
	host, _ := strings.CutPrefix(u, "nats://")
	return &natsServer{url: u, addr: host}
}

func jetstreamOf(nc *nats.Conn) jetstream.JetStream {
	js, err := jetstream.New(nc)
	if err != nil {
		panic(err) // only for a nil connection
	}
	return js
}

// embeddedServer starts a JetStream server in this process, on a free
// loopback port and a temporary store directory, and shuts it down when t
// ends.
func embeddedServer(t *testing.T) *natsServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	s := &natsServer{
		opts: &server.Options{
			Host:      "127.0.0.1",
			Port:      port,
			JetStream: true,
			StoreDir:  t.TempDir(),
			NoLog:     true,
			NoSigs:    true,
		},
		addr: "127.0.0.1:" + strconv.Itoa(port),
		url:  "nats://127.0.0.1:" + strconv.Itoa(port),
	}
	s.start(t)
	t.Cleanup(s.stop)
	return s
}

func (s *natsServer) start(t testing.TB) {
	t.Helper()
	ns, err := server.NewServer(s.opts)
	require.NoError(t, err)
	go ns.Start()
	if !ns.ReadyForConnections(30 * time.Second) {
		ns.Shutdown()
		t.Fatalf("the embedded NATS server did not start")
	}
	s.embedded = ns
}

func (s *natsServer) stop() {
	if s.embedded != nil {
		s.embedded.Shutdown()
		s.embedded.WaitForShutdown()
		s.embedded = nil
	}
}

// restart stops the embedded server and starts it again on the same port
// and store directory: its streams and consumers survive.
func (s *natsServer) restart(t testing.TB) {
	t.Helper()
	s.stop()
	s.start(t)
}

// harness is one test's world: a NATS server, an admin connection, a
// stream of its own, a migrated schema, an inbox client and an effects
// table.
type harness struct {
	t       *testing.T
	srv     *natsServer
	admin   *nats.Conn
	js      jetstream.JetStream
	stream  string
	subject string
	pool    *pgxpool.Pool
	client  *inbox.Client[pgx.Tx]
	effects string // quoted table name
}

func newHarness(t *testing.T, srv *natsServer) *harness {
	t.Helper()
	pool := testPool(t)
	schema := testdb.Schema(t)
	d, err := inboxpgx.New(pool, &inboxpgx.Config{Tables: inboxdriver.Tables{Schema: schema}})
	require.NoError(t, err)
	m, err := inboxmigrate.New(d)
	require.NoError(t, err)
	_, err = m.Up(context.Background())
	require.NoError(t, err)
	client, err := inbox.NewClient[pgx.Tx](d, nil)
	require.NoError(t, err)
	effects := pgx.Identifier{schema, "effects"}.Sanitize()
	_, err = pool.Exec(context.Background(), `CREATE TABLE `+effects+` (
  seq      bigserial PRIMARY KEY,
  event_id uuid NOT NULL,
  n        int  NOT NULL DEFAULT 0
)`)
	require.NoError(t, err)

	admin, err := nats.Connect(srv.url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(admin.Close)
	suffix := testdb.RandomSuffix()
	h := &harness{
		t:       t,
		srv:     srv,
		admin:   admin,
		js:      jetstreamOf(admin),
		stream:  "INBOXTEST_" + suffix,
		subject: "inboxtest." + suffix,
		pool:    pool,
		client:  client,
		effects: effects,
	}
	_, err = h.js.CreateStream(context.Background(), jetstream.StreamConfig{
		Name:     h.stream,
		Subjects: []string{h.subject + ".>"},
		Storage:  jetstream.FileStorage,
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := h.js.DeleteStream(ctx, h.stream); err != nil {
			t.Logf("delete stream %s: %v", h.stream, err)
		}
	})
	return h
}

// durable creates a pull consumer on the test stream with AckWait
// testAckWait and no delivery limit; adjust changes its configuration
// first.
func (h *harness) durable(adjust func(*jetstream.ConsumerConfig)) string {
	h.t.Helper()
	cc := jetstream.ConsumerConfig{
		Durable:    "billing",
		AckPolicy:  jetstream.AckExplicitPolicy,
		AckWait:    testAckWait,
		MaxDeliver: -1,
	}
	if adjust != nil {
		adjust(&cc)
	}
	_, err := h.js.CreateOrUpdateConsumer(context.Background(), h.stream, cc)
	require.NoError(h.t, err)
	return cc.Durable
}

// info returns the JetStream consumer's state.
func (h *harness) info(durable string) *jetstream.ConsumerInfo {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := h.js.Consumer(ctx, h.stream, durable)
	require.NoError(h.t, err)
	info, err := cons.Info(ctx)
	require.NoError(h.t, err)
	return info
}

// waitSettled waits until the JetStream consumer has nothing left to
// deliver and nothing unacknowledged: every message was acked or
// terminated.
func (h *harness) waitSettled(durable string) *jetstream.ConsumerInfo {
	h.t.Helper()
	var info *jetstream.ConsumerInfo
	eventually(h.t, "every message acked or terminated", func() bool {
		info = h.info(durable)
		return info.NumPending == 0 && info.NumAckPending == 0 && info.NumRedelivered == 0
	})
	return info
}

// event is a test message body.
type event struct {
	N      int    `json:"n"`
	Poison string `json:"poison,omitempty"`
}

// publish publishes e with id in the event-id header ("" for none) and
// returns its stream sequence. opts add publish options, such as a
// message id.
func (h *harness) publish(id string, e event, opts ...jetstream.PublishOpt) uint64 {
	h.t.Helper()
	data, err := json.Marshal(e)
	require.NoError(h.t, err)
	msg := nats.NewMsg(h.subject + ".events")
	msg.Data = data
	if id != "" {
		msg.Header.Set(inboxnats.HeaderEventID, id)
	}
	ack, err := h.js.PublishMsg(context.Background(), msg, opts...)
	require.NoError(h.t, err)
	return ack.Sequence
}

// effectCount is how many effect rows the event has.
func (h *harness) effectCount(eventID string) int {
	h.t.Helper()
	var n int
	err := h.pool.QueryRow(context.Background(), `SELECT count(*) FROM `+h.effects+` WHERE event_id = $1`, eventID).Scan(&n)
	require.NoError(h.t, err)
	return n
}

// effectOrder is the n of every effect row, in the order they committed.
func (h *harness) effectOrder() []int {
	h.t.Helper()
	rows, err := h.pool.Query(context.Background(), `SELECT n FROM `+h.effects+` ORDER BY seq`)
	require.NoError(h.t, err)
	order, err := pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(h.t, err)
	return order
}

// applyEffect is the side effect of the test handlers: one row per
// application of the event, in the message's transaction.
func (h *harness) applyEffect(ctx context.Context, tx pgx.Tx, msg inbox.Message) (event, error) {
	var e event
	if err := json.Unmarshal(msg.Payload, &e); err != nil {
		return e, inbox.Permanent(err)
	}
	_, err := tx.Exec(ctx, `INSERT INTO `+h.effects+` (event_id, n) VALUES ($1, $2)`, msg.ID, e.N)
	return e, err
}

// effectHandler applies the effect and counts its calls.
func (h *harness) effectHandler(calls *atomic.Int32) inbox.Handler[pgx.Tx] {
	return inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
		calls.Add(1)
		_, err := h.applyEffect(ctx, tx, msg)
		return err
	})
}

// config is the test consumer configuration for durable.
func (h *harness) config(durable string) *inboxnats.Config {
	return &inboxnats.Config{
		Stream:          h.stream,
		Durable:         durable,
		Consumer:        "billing",
		Key:             inbox.HeaderKey(inboxnats.HeaderEventID),
		FetchWait:       500 * time.Millisecond,
		RetryBackoff:    100 * time.Millisecond,
		ShutdownTimeout: 10 * time.Second,
		Logger:          slog.New(slog.NewTextHandler(h.t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
}

// running is a consumer started by start.
type running struct {
	t      *testing.T
	nc     *nats.Conn
	proxy  *tcpproxy.Proxy
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// crash closes the consumer's connection for good: from then on it can
// neither fetch nor acknowledge anything, as if its process had died.
func (r *running) crash() { r.nc.Close() }

// start runs a consumer of cfg with a connection of its own through a
// proxy. wrap, if not nil, wraps Run's context (to arm fault hooks); it
// gets the consumer before Run starts. The consumer is stopped at the end
// of the test if the test has not stopped it.
func (h *harness) start(cfg *inboxnats.Config, handler inbox.Handler[pgx.Tx], wrap func(*running, context.Context) context.Context) *running {
	h.t.Helper()
	proxy, err := tcpproxy.Start(h.srv.addr)
	require.NoError(h.t, err)
	nc, err := nats.Connect("nats://"+proxy.Addr(),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(50*time.Millisecond),
		nats.ReconnectJitter(0, 0),
	)
	require.NoError(h.t, err)
	r := &running{t: h.t, nc: nc, proxy: proxy, done: make(chan error, 1)}
	consumer, err := inboxnats.New(jetstreamOf(nc), h.client, handler, cfg)
	require.NoError(h.t, err)
	ctx, cancel := context.WithCancel(context.Background())
	if wrap != nil {
		ctx = wrap(r, ctx)
	}
	r.cancel = cancel
	go func() { r.done <- consumer.Run(ctx) }()
	h.t.Cleanup(func() { r.stop() })
	return r
}

// stop cancels the consumer and waits for Run to return, then closes its
// connection and proxy. It returns Run's error.
func (r *running) stop() error {
	r.t.Helper()
	r.once.Do(func() {
		r.cancel()
		select {
		case r.err = <-r.done:
		case <-time.After(waitDeadline):
			r.t.Fatalf("Run did not return within %v of its context's cancellation", waitDeadline)
		}
		r.nc.Close()
		r.proxy.Close()
	})
	return r.err
}

// eventually polls cond until it holds, failing t at the deadline.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitDeadline)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for: %s", waitDeadline, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitClosed waits for ch to be closed, failing t at the deadline.
func waitClosed(t testing.TB, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(waitDeadline):
		t.Fatalf("timed out after %v waiting for: %s", waitDeadline, what)
	}
}
