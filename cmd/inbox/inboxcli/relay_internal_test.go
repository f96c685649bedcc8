package inboxcli

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox/internal/testdb"
	"github.com/txinbox/inbox/outbox"
)

// The relay's RabbitMQ sink dials again after its connection closed: the
// publish that finds it closed goes out on a new one.
func TestRabbitSinkDialsAgain(t *testing.T) {
	t.Parallel()
	url := testdb.AMQPURL()
	admin, err := amqp.Dial(url)
	testdb.Require(t, "RabbitMQ", err)
	t.Cleanup(func() { admin.Close() })
	ch, err := admin.Channel()
	require.NoError(t, err)
	q := "inboxrelay.redial." + testdb.RandomSuffix()
	_, err = ch.QueueDeclare(q, false, false, false, false, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = ch.QueueDelete(q, false, false, false) })

	s := &rabbitSink{url: url}
	require.NoError(t, s.dial())
	t.Cleanup(s.close)
	ctx := context.Background()
	rec := func(id string) []outbox.Record {
		return []outbox.Record{{ID: id, Topic: q, Headers: map[string]string{outbox.HeaderEventID: id}, CreatedAt: time.Now()}}
	}
	require.NoError(t, s.Publish(ctx, rec("a"))[0])
	first := s.conn
	require.NoError(t, first.Close()) // the broker went away, say
	require.NoError(t, s.Publish(ctx, rec("b"))[0])
	require.True(t, s.conn != first, "a new connection")
	for _, id := range []string{"a", "b"} {
		d, ok, err := ch.Get(q, true)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, id, d.MessageId)
	}
}
