package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxrabbit"
	"github.com/txinbox/inbox/internal/tcpproxy"
	"github.com/txinbox/inbox/internal/testdb"
)

// rabbitURL is the broker of a RabbitMQ run: INBOX_CHAOS_AMQP_URL, or the
// machine's server.
func rabbitURL() string {
	if u := os.Getenv("INBOX_CHAOS_AMQP_URL"); u != "" {
		return u
	}
	return "amqp://guest:guest@127.0.0.1:5672/"
}

// rabbitTransport is a queue of the run on a RabbitMQ server, with a proxy
// in the coordinator that the consumers connect through. Its broker fault
// closes every consumer connection at once, from outside the consumers, as
// a broker restart or a network failure would (the management API, which
// could close them from the server, is often not enabled).
type rabbitTransport struct {
	url   *url.URL
	queue string
	proxy *tcpproxy.Proxy

	mu   sync.Mutex
	conn *amqp.Connection
	ch   *amqp.Channel
}

func newRabbit(_ context.Context, _ *Config) (*rabbitTransport, error) {
	u, err := url.Parse(rabbitURL())
	if err != nil {
		return nil, fmt.Errorf("chaos: AMQP URL: %w", err)
	}
	t := &rabbitTransport{url: u, queue: "inbox.chaos." + testdb.RandomSuffix()}
	if err := t.connect(); err != nil {
		return nil, fmt.Errorf("chaos: RabbitMQ at %s: %w", u.Redacted(), err)
	}
	if _, err := t.ch.QueueDeclare(t.queue, true, false, false, false, nil); err != nil {
		t.close()
		return nil, fmt.Errorf("chaos: declare queue %s: %w", t.queue, err)
	}
	t.proxy, err = tcpproxy.Start(u.Host)
	if err != nil {
		t.close()
		return nil, err
	}
	return t, nil
}

// connect opens the producer's connection and a channel in confirm mode.
func (t *rabbitTransport) connect() error {
	conn, err := amqp.Dial(t.url.String())
	if err != nil {
		return err
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		conn.Close()
		return err
	}
	t.conn, t.ch = conn, ch
	return nil
}

// send publishes e once and waits for the broker's confirm.
func (t *rabbitTransport) send(ctx context.Context, e event) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ch == nil || t.ch.IsClosed() {
		if t.conn != nil {
			t.conn.Close()
		}
		if err := t.connect(); err != nil {
			return err
		}
	}
	conf, err := t.ch.PublishWithDeferredConfirmWithContext(ctx, "", t.queue, true, false, amqp.Publishing{
		Body:         e.body(),
		DeliveryMode: amqp.Persistent,
		Headers:      amqp.Table{inboxrabbit.HeaderEventID: e.ID},
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ok, err := conf.WaitContext(ctx)
	if err == nil && !ok {
		err = fmt.Errorf("chaos: the broker refused a publish")
	}
	return err
}

func (t *rabbitTransport) consumerArgs() []string {
	via := *t.url
	via.Host = t.proxy.Addr()
	return []string{"--transport", "rabbitmq", "--endpoint", via.String(), "--queue-url", t.queue}
}

// injectFault closes every consumer connection.
func (t *rabbitTransport) injectFault(*rand.Rand) bool {
	t.proxy.Cut()
	return true
}

func (t *rabbitTransport) close() {
	if t.proxy != nil {
		t.proxy.Close()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ch != nil && !t.ch.IsClosed() {
		_, _ = t.ch.QueueDelete(t.queue, false, false, false)
	}
	if t.conn != nil {
		t.conn.Close()
	}
}

// runRabbitConsumer runs the inboxrabbit adapter in a consumer process.
func runRabbitConsumer(ctx context.Context, f *consumerFlags, client *inbox.Client[pgx.Tx], h inbox.Handler[pgx.Tx]) error {
	c, err := inboxrabbit.New(inboxrabbit.DialURL(f.endpoint, amqp.Config{}), client, h, &inboxrabbit.Config{
		Queue:    f.queueURL,
		Consumer: f.consumer,
		Key:      inbox.JSONKey("event_id"),
		Batch:    100,
		// Chaos makes messages come back often; none of that is the
		// message's fault.
		MaxDeliveries:       1000,
		RetryBackoff:        100 * time.Millisecond,
		MaxRetryBackoff:     2 * time.Second,
		ReconnectBackoff:    50 * time.Millisecond,
		MaxReconnectBackoff: time.Second,
		ShutdownTimeout:     5 * time.Second,
		Logger:              consumerLogger(),
	})
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

// calm: a cut connection is over when injectFault returns; nothing waits.
func (t *rabbitTransport) calm() {}

// redelivery: the broker requeues what a killed consumer held as soon as
// its connection closes; a message held back after a failure waits at
// most the consumers' MaxRetryBackoff, and a consumer whose connection was
// cut dials again within its MaxReconnectBackoff.
func (t *rabbitTransport) redelivery() time.Duration {
	return 2*time.Second + time.Second
}
