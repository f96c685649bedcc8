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
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxnats"
	"github.com/txinbox/inbox/inboxpgx/inboxpgxtest"
	"github.com/txinbox/inbox/inboxtest"
	"github.com/txinbox/inbox/inboxtransport/transporttest"
	"github.com/txinbox/inbox/internal/tcpproxy"
	"github.com/txinbox/inbox/internal/testdb"
	"github.com/txinbox/inbox/outbox"
)

func TestMain(m *testing.M) { transporttest.Main(m, transport) }

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
func machineServer(t testing.TB) *natsServer {
	t.Helper()
	u := testdb.NATSURL()
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
	fx      *inboxpgxtest.Effects
}

func newHarness(t *testing.T, srv *natsServer) *harness {
	t.Helper()
	st := inboxpgxtest.NewStore(t)
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
		pool:    st.Pool,
		client:  st.Client,
		fx:      st.Effects,
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
type event = inboxpgxtest.Event

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
		msg.Header.Set(outbox.HeaderEventID, id)
	}
	ack, err := h.js.PublishMsg(context.Background(), msg, opts...)
	require.NoError(h.t, err)
	return ack.Sequence
}

// publishN publishes n events, numbered from 0, each with an id of its
// own, and returns their ids.
func (h *harness) publishN(n int) []string {
	h.t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = inboxtest.NewID()
		h.publish(ids[i], event{N: i})
	}
	return ids
}

// config is the test consumer configuration for durable.
func (h *harness) config(durable string) *inboxnats.Config {
	return &inboxnats.Config{
		Stream:    h.stream,
		Durable:   durable,
		Consumer:  "billing",
		Key:       inbox.HeaderKey(outbox.HeaderEventID),
		FetchWait: 500 * time.Millisecond,
		Settings:  transporttest.Settings(h.t),
	}
}

// running is a consumer started by start.
type running struct {
	*transporttest.Running
	nc    *nats.Conn
	proxy *tcpproxy.Proxy
}

// crash closes the consumer's connection for good: from then on it can
// neither fetch nor acknowledge anything, as if its process had died.
func (r *running) crash() { r.nc.Close() }

// start runs a consumer of cfg with a connection of its own through a
// proxy. wrap, if not nil, wraps Run's context (to arm fault hooks); it
// gets the consumer before Run starts. The consumer is stopped at the end
// of the test if the test has not stopped it; Stop closes its connection
// and proxy.
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
	r := &running{nc: nc, proxy: proxy}
	consumer, err := inboxnats.New(jetstreamOf(nc), h.client, handler, cfg)
	require.NoError(h.t, err)
	ctx := context.Background()
	if wrap != nil {
		ctx = wrap(r, ctx)
	}
	r.Running = transporttest.Start(h.t, ctx, consumer.Run, func() { nc.Close(); proxy.Close() })
	return r
}

var (
	eventually = transporttest.Eventually
	waitClosed = transporttest.WaitClosed
)
