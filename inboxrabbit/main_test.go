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
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxpgx/inboxpgxtest"
	"github.com/txinbox/inbox/inboxrabbit"
	"github.com/txinbox/inbox/inboxtransport/transporttest"
	"github.com/txinbox/inbox/internal/tcpproxy"
	"github.com/txinbox/inbox/internal/testdb"
	"github.com/txinbox/inbox/outbox"
)

func TestMain(m *testing.M) { transporttest.Main(m, transport) }

// harness is one test's world: an admin connection and channel, queues of
// its own, a migrated schema, an inbox client and an effects table.
type harness struct {
	t      *testing.T
	url    *url.URL
	admin  *amqp.Connection
	ch     *amqp.Channel
	prefix string
	pool   *pgxpool.Pool
	client *inbox.Client[pgx.Tx]
	fx     *inboxpgxtest.Effects

	mu         sync.Mutex
	deliveries map[string]int // event id → deliveries seen by a KeyFunc
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	u, err := url.Parse(testdb.AMQPURL())
	require.NoError(t, err)
	admin, err := amqp.Dial(u.String())
	testdb.Require(t, "RabbitMQ at "+u.Redacted(), err)
	t.Cleanup(func() { admin.Close() })
	ch, err := admin.Channel()
	require.NoError(t, err)

	st := inboxpgxtest.NewStore(t)
	return &harness{
		t:          t,
		url:        u,
		admin:      admin,
		ch:         ch,
		prefix:     "inboxtest." + testdb.RandomSuffix(),
		pool:       st.Pool,
		client:     st.Client,
		fx:         st.Effects,
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
type event = inboxpgxtest.Event

// publish publishes e to queue with id in the event-id header ("" for
// none), and waits for the broker's confirm.
func (h *harness) publish(queue, id string, e event) {
	h.t.Helper()
	body, err := json.Marshal(e)
	require.NoError(h.t, err)
	pub := amqp.Publishing{Body: body, DeliveryMode: amqp.Persistent}
	if id != "" {
		pub.Headers = amqp.Table{outbox.HeaderEventID: id}
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

// waitDeadline bounds waitHandedOut.
const waitDeadline = 60 * time.Second

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
	id := msg.Headers[outbox.HeaderEventID]
	h.mu.Lock()
	h.deliveries[id]++
	h.mu.Unlock()
	return inbox.HeaderKey(outbox.HeaderEventID)(msg)
}

// config is the test consumer configuration for queue.
func (h *harness) config(queue string) *inboxrabbit.Config {
	return &inboxrabbit.Config{
		Queue:            queue,
		Consumer:         "billing",
		Key:              h.key,
		ReconnectBackoff: 50 * time.Millisecond,
		Settings:         transporttest.Settings(h.t),
	}
}

// running is a consumer started by start.
type running struct {
	*transporttest.Running
	proxy *tcpproxy.Proxy
	dials atomic.Int32
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
// test if the test has not stopped it. Once Stop returns, the broker has
// requeued whatever the consumer left unacknowledged.
func (h *harness) start(cfg *inboxrabbit.Config, handler inbox.Handler[pgx.Tx], wrap func(*running, context.Context) context.Context) *running {
	h.t.Helper()
	proxy, err := tcpproxy.Start(h.url.Host)
	require.NoError(h.t, err)
	r := &running{proxy: proxy}
	via := *h.url
	via.Host = proxy.Addr()
	dial := inboxrabbit.DialURL(via.String(), amqp.Config{})
	consumer, err := inboxrabbit.New(func(ctx context.Context) (*amqp.Connection, error) {
		r.dials.Add(1)
		return dial(ctx)
	}, h.client, handler, cfg)
	require.NoError(h.t, err)
	ctx := context.Background()
	if wrap != nil {
		ctx = wrap(r, ctx)
	}
	r.Running = transporttest.Start(h.t, ctx, consumer.Run, proxy.Close)
	return r
}

// stop stops the consumer, and checks that its Run returned nil.
func (r *running) stop() { require.NoError(r.Running.T(), r.Stop()) }

var (
	eventually = transporttest.Eventually
	waitClosed = transporttest.WaitClosed
)
