package inboxwatermill_test

import (
	"context"
	"database/sql"
	"sync/atomic"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox/inboxwatermill"
	"github.com/txinbox/inbox/outbox"
)

// The outbox Publisher enqueues in the transaction of the messages'
// context, which commits or rolls back with the caller's work, and refuses
// a message with no transaction.
func TestPublisherEnqueuesInTheCallersTransaction(t *testing.T) {
	t.Parallel()
	onBothStores(t, publisherEnqueuesInTx[*sql.Tx], publisherEnqueuesInTx[pgx.Tx])
}

func publisherEnqueuesInTx[TTx any](t *testing.T, s *store[TTx]) {
	ctx := context.Background()
	pub := inboxwatermill.NewPublisher(s.outbox)
	err := pub.Publish("orders", message.NewMessage(watermill.NewUUID(), nil))
	require.ErrorIs(t, err, inboxwatermill.ErrNoTx)

	// Inside a handler under the middleware: the handler's transaction.
	var runs atomic.Int32
	effect := effectHandler(s, &runs)
	h := inboxwatermill.Middleware(s.client, "billing", nil)(func(msg *message.Message) ([]*message.Message, error) {
		if _, err := effect(msg); err != nil {
			return nil, err
		}
		out := message.NewMessage(watermill.NewUUID(), []byte(`receipt`))
		out.SetContext(msg.Context())
		return nil, pub.Publish("receipts", out)
	})
	in := message.NewMessage(watermill.NewUUID(), nil)
	for range 2 {
		produced, err := h(in)
		require.NoError(t, err)
		require.Len(t, produced, 0)
	}
	require.Equal(t, int32(1), runs.Load())

	sink := &outbox.MemorySink{}
	relay, err := s.outbox.NewRelay(sink, nil)
	require.NoError(t, err)
	res, err := relay.RelayOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Published)
	rec := sink.Records()[0]
	require.Equal(t, "receipts", rec.Topic)
	require.Equal(t, in.UUID, rec.Headers[outbox.HeaderCausationID])
}
