package inboxcli_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox/internal/testdb"
	"github.com/txinbox/inbox/outbox"
)

// relayFixture is an outbox in a schema of the test's own, with events to
// topic enqueued, and what 'inbox relay' needs to reach it.
func relayFixture(t *testing.T, topic string, n int) (ids []string, env map[string]string, with func(...string) []string) {
	t.Helper()
	ctx := context.Background()
	d, schema := migratedPgx(t)
	o, err := outbox.New(d, nil)
	require.NoError(t, err)
	for range n {
		got, err := o.Enqueue(ctx, outbox.Message{Topic: topic, Payload: []byte(`{}`)})
		require.NoError(t, err)
		ids = append(ids, got...)
	}
	return ids, map[string]string{"DATABASE_URL": testdb.URL(t)}, func(args ...string) []string { return append(args, "--schema", schema) }
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// 'inbox relay --sink nats' publishes to the machine's JetStream, with the
// event id as Nats-Msg-Id.
func TestRelaySinkNATS(t *testing.T) {
	t.Parallel()
	url := envOr("TEST_NATS_URL", nats.DefaultURL)
	nc, err := nats.Connect(url, nats.Timeout(3*time.Second))
	testdb.Require(t, "NATS at "+url, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx := context.Background()
	suffix := testdb.RandomSuffix()
	stream := "INBOXRELAY_" + suffix
	subject := "inboxrelay." + suffix
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{subject}})
	testdb.Require(t, "JetStream at "+url, err)
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), stream) })

	ids, env, with := relayFixture(t, subject, 3)
	code, out, errOut := run(t, env, with("relay", "--sink", "nats", "--nats-url", url, "--once")...)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "published 3 events")
	s, err := js.Stream(ctx, stream)
	require.NoError(t, err)
	for i, id := range ids {
		m, err := s.GetMsg(ctx, uint64(i+1))
		require.NoError(t, err)
		require.Equal(t, id, m.Header.Get(jetstream.MsgIDHeader))
		require.Equal(t, id, m.Header.Get(outbox.HeaderEventID))
	}
}

// 'inbox relay --sink rabbitmq' publishes to the machine's RabbitMQ with
// confirms, the event id as message-id.
func TestRelaySinkRabbitMQ(t *testing.T) {
	t.Parallel()
	url := envOr("TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
	conn, err := amqp.Dial(url)
	testdb.Require(t, "RabbitMQ", err)
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	q := "inboxrelay." + testdb.RandomSuffix()
	_, err = ch.QueueDeclare(q, false, false, false, false, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = ch.QueueDelete(q, false, false, false) })

	ids, env, with := relayFixture(t, q, 3)
	code, out, errOut := run(t, env, with("relay", "--sink", "rabbitmq", "--amqp-url", url, "--once")...)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "published 3 events")
	for _, id := range ids {
		d, ok, err := ch.Get(q, true)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, id, d.MessageId)
	}

	code, _, errOut = run(t, env, with("relay", "--sink", "rabbitmq", "--brokers", "localhost:9092", "--once")...)
	require.Equal(t, 2, code, "--brokers is for kafka")
	requireOneLine(t, errOut)
	code, _, errOut = run(t, env, with("relay", "--sink", "smoke-signals", "--once")...)
	require.Equal(t, 2, code)
	requireOneLine(t, errOut)
}

// 'relay --once' exits 0 only when it leaves nothing to publish: events the
// broker rejected (a queue that does not exist) are still pending, and the
// command says so with exit 1.
func TestRelayOnceRejectedIsNotDone(t *testing.T) {
	t.Parallel()
	url := envOr("TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
	conn, err := amqp.Dial(url)
	testdb.Require(t, "RabbitMQ", err)
	conn.Close()

	// The default exchange routes by queue name: no such queue, and the
	// mandatory publish comes back.
	_, env, with := relayFixture(t, "inboxrelay.missing."+testdb.RandomSuffix(), 2)
	code, out, errOut := run(t, env, with("relay", "--sink", "rabbitmq", "--amqp-url", url, "--once")...)
	require.Equal(t, 1, code, "out: %s err: %s", out, errOut)
	require.Contains(t, out, "published 0 events")
	// The relay logs each rejection; the last line is the verdict.
	lines := strings.Split(strings.TrimSpace(errOut), "\n")
	require.Contains(t, lines[len(lines)-1], "inbox relay: 2 events are still pending (2 rejected by RabbitMQ")
}

// 'relay --once' to Kafka brokers that do not answer says so within
// --connect-timeout, instead of waiting out each publish's retries.
func TestRelayOnceUnreachableKafka(t *testing.T) {
	t.Parallel()
	_, env, with := relayFixture(t, "orders", 1)
	code, out, errOut := run(t, env, with("relay", "--brokers", "127.0.0.1:1", "--once", "--connect-timeout", "500ms")...)
	require.Equal(t, 1, code, errOut)
	require.Empty(t, out)
	requireOneLine(t, errOut)
	require.Contains(t, errOut, "cannot reach Kafka at 127.0.0.1:1 within 500ms")
}
