package inboxrabbit_test

import (
	"context"
	"fmt"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/inboxrabbit"
	"github.com/txinbox/inbox/outbox"
	"github.com/txinbox/inbox/outbox/outboxtest"
)

// The sink conformance suite on the machine's RabbitMQ: a queue of the
// test's own through the default exchange, a queue that does not exist for
// an unroutable (returned) record, and the sink's connection closed for
// the broker's unavailability.
func TestOutboxSink(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	q := h.queue("outbox", nil)
	conn, err := amqp.Dial(h.url.String())
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	sink, err := inboxrabbit.NewOutboxSink(ch, nil)
	require.NoError(t, err)

	deliveries, err := h.ch.Consume(q, "", true, false, false, false, nil)
	require.NoError(t, err)
	outboxtest.Run(t, outboxtest.Harness{
		Sink:  sink,
		Topic: q,
		Receive: func(ctx context.Context) ([]outboxtest.Received, error) {
			select {
			case d := <-deliveries:
				m := outboxtest.Received{Headers: map[string]string{}, Payload: d.Body, BrokerID: d.MessageId}
				for k, v := range d.Headers {
					m.Headers[k] = fmt.Sprint(v)
				}
				return []outboxtest.Received{m}, nil
			case <-ctx.Done():
				return nil, nil
			}
		},
		Unroutable: h.prefix + ".no-such-queue",
		Break:      func(t *testing.T) { require.NoError(t, conn.Close()) },
	})
}

func TestNewOutboxSinkNeedsAChannel(t *testing.T) {
	_, err := inboxrabbit.NewOutboxSink(nil, nil)
	require.ErrorContains(t, err, "channel is nil")
}

// A relay over the sink publishes persistent messages whose message-id is
// the event id, and deletes the rows it published.
func TestOutboxRelayToRabbitMQ(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	q := h.queue("relay", nil)
	ch, err := h.admin.Channel()
	require.NoError(t, err)
	sink, err := inboxrabbit.NewOutboxSink(ch, &inboxrabbit.OutboxSinkConfig{})
	require.NoError(t, err)
	o, err := outbox.New(h.client.Driver().(*inboxpgx.Driver), nil)
	require.NoError(t, err)
	ctx := context.Background()
	var ids []string
	for i := range 5 {
		got, err := o.Enqueue(ctx, outbox.Message{Topic: q, Payload: []byte(fmt.Sprintf(`{"n":%d}`, i))})
		require.NoError(t, err)
		ids = append(ids, got...)
	}
	r, err := o.NewRelay(sink, nil)
	require.NoError(t, err)
	res, err := r.RelayOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 5, res.Published)
	st, err := h.client.Admin().OutboxStats(ctx)
	require.NoError(t, err)
	require.Zero(t, st.Pending)
	for _, id := range ids {
		d, ok, err := h.ch.Get(q, true)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, id, d.MessageId)
		require.Equal(t, id, d.Headers[outbox.HeaderEventID])
		require.Equal(t, amqp.Persistent, d.DeliveryMode)
	}
}
