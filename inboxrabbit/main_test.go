// The tests of inboxrabbit run the adapter against the machine's RabbitMQ
// (TEST_AMQP_URL, amqp://guest:guest@127.0.0.1:5672/ by default; 3.10
// here) with the real Postgres store (inboxpgx over internal/testdb), and
// count the effect rows per event id to check that each event was applied
// exactly once. Locally a missing broker skips these tests; with CI=true it
// fails them.
//
// Each test declares its own queues (and dead-letter exchange), named with
// a random suffix, and deletes them. Consumers dial through a loopback TCP
// proxy (internal/tcpproxy), so that a test can cut a consumer's
// connection, as a network failure would, without the management API
// (often closed) and without touching the broker's other clients.
//
// A test counts the deliveries of each event by wrapping the KeyFunc,
// which the consumer calls once per delivery.
//
// # Simulated crashes
//
// A consumer "crashes" at a fault point (internal/fault's hook) by losing
// its network for good, from inside the hook, before it can ack: the proxy
// cuts its connection and refuses its dials. A crash before commit also
// terminates the transaction's Postgres backend, so the commit fails as it
// would if the process had died. The broker requeues the delivery, and a
// second consumer gets it. The chaos tests kill real processes at the same
// points.
package inboxrabbit_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxmigrate"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/inboxrabbit"
	"github.com/txinbox/inbox/internal/require"
	"github.com/txinbox/inbox/internal/tcpproxy"
	"github.com/txinbox/inbox/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

const waitDeadline = 60 * time.Second

// brokerURL is the machine's RabbitMQ.
func brokerURL() string {
	if u := os.Getenv("TEST_AMQP_URL"); u != "" {
		return u
	}
	return "amqp://guest:guest@127.0.0.1:5672/"
}

// harness is one test's world: an admin connection and channel, queues of
// its own, a migrated schema, an inbox client and an effects table.
type harness struct {
	t       *testing.T
	url     *url.URL
	admin   *amqp.Connection
	ch      *amqp.Channel
	prefix  string
	pool    *pgxpool.Pool
	client  *inbox.Client[pgx.Tx]
	effects string // quoted table name

	mu         sync.Mutex
	deliveries map[string]int // event id → deliveries seen by a KeyFunc
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	u, err := url.Parse(brokerURL())
	require.NoError(t, err)
	admin, err := amqp.Dial(u.String())
	testdb.Require(t, "RabbitMQ at "+u.Redacted(), err)
	t.Cleanup(func() { admin.Close() })
	ch, err := admin.Channel()
	require.NoError(t, err)

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
	return &harness{
		t:          t,
		url:        u,
		admin:      admin,
		ch:         ch,
		prefix:     "inboxtest." + testdb.RandomSuffix(),
		pool:       pool,
		client:     client,
		effects:    effects,
		deliveries: map[string]int{},
	}
}

// queue declares a durable queue named for the test with args, and deletes
// it when the test ends.
func (h *harness) queue(name string, args amqp.Table) string {
	h.t.Helper()
	name = h.prefix + "." + name
	_, err := h.ch.QueueDeclare(name, true, false, false, false, args)
	require.NoError(h.t, err)
	h.t.Cleanup(func() {
		if _, err := h.ch.QueueDelete(name, false, false, false); err != nil {
			h.t.Logf("delete queue %s: %v", name, err)
		}
	})
	return name
}

// deadLetterQueue declares a fanout exchange and a queue bound to it, for
// the dead letters of another queue, and returns the exchange and the
// queue.
func (h *harness) deadLetterQueue() (string, string) {
	h.t.Helper()
	exchange := h.prefix + ".dlx"
	require.NoError(h.t, h.ch.ExchangeDeclare(exchange, "fanout", false, true, false, false, nil))
	h.t.Cleanup(func() { _ = h.ch.ExchangeDelete(exchange, false, false) })
	q := h.queue("dlq", nil)
	require.NoError(h.t, h.ch.QueueBind(q, "", exchange, false, nil))
	return exchange, q
}

// event is a test message body.
type event struct {
	N      int    `json:"n"`
	Poison string `json:"poison,omitempty"`
}

// publish publishes e to queue with id in the event-id header ("" for
// none), and waits for the broker's confirm.
func (h *harness) publish(queue, id string, e event) {
	h.t.Helper()
	body, err := json.Marshal(e)
	require.NoError(h.t, err)
	pub := amqp.Publishing{Body: body, DeliveryMode: amqp.Persistent}
	if id != "" {
		pub.Headers = amqp.Table{inboxrabbit.HeaderEventID: id}
	}
	ch, err := h.admin.Channel()
	require.NoError(h.t, err)
	defer ch.Close()
	require.NoError(h.t, ch.Confirm(false))
	conf, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", queue, true, false, pub)
	require.NoError(h.t, err)
	ok, err := conf.WaitContext(context.Background())
	require.NoError(h.t, err)
	require.True(h.t, ok, "the broker confirmed the publish")
}

// ready is how many messages queue holds ready for delivery (not those
// delivered and unacknowledged).
func (h *harness) ready(queue string) int {
	h.t.Helper()
	ch, err := h.admin.Channel()
	require.NoError(h.t, err)
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	require.NoError(h.t, err)
	return q.Messages
}

// waitHandedOut waits, for at most waitDeadline, until queue holds no
// message ready for delivery: the broker handed every one to a consumer.
// It runs on a consumer's goroutine (a fault hook), so it reports nothing:
// the test's own waits fail if it gives up.
func (h *harness) waitHandedOut(queue string) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(waitDeadline)
	for time.Now().Before(deadline) {
		ch, err := h.admin.Channel()
		if err == nil {
			q, qerr := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
			ch.Close()
			if qerr == nil && q.Messages == 0 {
				return
			}
		}
		<-tick.C
	}
}

// get takes up to n messages from queue, acking them.
func (h *harness) get(queue string, n int) []amqp.Delivery {
	h.t.Helper()
	var out []amqp.Delivery
	for range n {
		d, ok, err := h.ch.Get(queue, true)
		require.NoError(h.t, err)
		if !ok {
			break
		}
		out = append(out, d)
	}
	return out
}

// delivered is how many times the event was delivered to a consumer of
// this harness.
func (h *harness) delivered(id string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.deliveries[id]
}

// total is how many deliveries consumers of this harness saw.
func (h *harness) total() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, k := range h.deliveries {
		n += k
	}
	return n
}

// key is the test KeyFunc: the event-id header, with each delivery
// counted.
func (h *harness) key(msg inbox.Message) (string, error) {
	id := msg.Headers[inboxrabbit.HeaderEventID]
	h.mu.Lock()
	h.deliveries[id]++
	h.mu.Unlock()
	return inbox.HeaderKey(inboxrabbit.HeaderEventID)(msg)
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

// config is the test consumer configuration for queue.
func (h *harness) config(queue string) *inboxrabbit.Config {
	return &inboxrabbit.Config{
		Queue:            queue,
		Consumer:         "billing",
		Key:              h.key,
		RetryBackoff:     100 * time.Millisecond,
		ReconnectBackoff: 50 * time.Millisecond,
		ShutdownTimeout:  10 * time.Second,
		Logger:           slog.New(slog.NewTextHandler(h.t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
}

// running is a consumer started by start.
type running struct {
	t      *testing.T
	proxy  *tcpproxy.Proxy
	dials  atomic.Int32
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

// crash cuts the consumer's connection and refuses its dials for good:
// from then on it can acknowledge nothing, as if its process had died.
func (r *running) crash() {
	r.proxy.Refuse(true)
	r.proxy.Cut()
}

// start runs a consumer of cfg that dials through a proxy of its own. wrap,
// if not nil, wraps Run's context (to arm fault hooks); it gets the
// consumer before Run starts. The consumer is stopped at the end of the
// test if the test has not stopped it.
func (h *harness) start(cfg *inboxrabbit.Config, handler inbox.Handler[pgx.Tx], wrap func(*running, context.Context) context.Context) *running {
	h.t.Helper()
	proxy, err := tcpproxy.Start(h.url.Host)
	require.NoError(h.t, err)
	r := &running{t: h.t, proxy: proxy, done: make(chan error, 1)}
	via := *h.url
	via.Host = proxy.Addr()
	dial := inboxrabbit.DialURL(via.String(), amqp.Config{})
	consumer, err := inboxrabbit.New(func(ctx context.Context) (*amqp.Connection, error) {
		r.dials.Add(1)
		return dial(ctx)
	}, h.client, handler, cfg)
	require.NoError(h.t, err)
	ctx, cancel := context.WithCancel(context.Background())
	if wrap != nil {
		ctx = wrap(r, ctx)
	}
	r.cancel = cancel
	go func() { r.done <- consumer.Run(ctx) }()
	h.t.Cleanup(r.stop)
	return r
}

// stop cancels the consumer, waits for Run to return nil, and closes its
// proxy. Once it returns, the broker has requeued whatever the consumer
// left unacknowledged.
func (r *running) stop() {
	r.t.Helper()
	r.once.Do(func() {
		r.cancel()
		select {
		case err := <-r.done:
			require.NoError(r.t, err)
		case <-time.After(waitDeadline):
			r.t.Fatalf("Run did not return within %v of its context's cancellation", waitDeadline)
		}
		r.proxy.Close()
	})
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
