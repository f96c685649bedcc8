package inboxpgx_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/outbox"
)

// EnqueueBatch queues the events on the caller's batch: they are written
// with the business statement in one round trip, kept when the
// transaction commits and gone when it rolls back, with the ids it
// returned.
func TestOutboxEnqueueBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, _ := newDriver(t, inboxdriver.Tables{})
	for _, ordered := range []bool{false, true} {
		o, err := outbox.New(d, &outbox.Config{Ordered: ordered})
		require.NoError(t, err)

		// Nothing is queued for an invalid message, nor on a batch of the
		// wrong type.
		b := &pgx.Batch{}
		_, err = o.EnqueueBatch(b, outbox.Message{})
		require.True(t, errors.Is(err, outbox.ErrInvalidMessage), err)
		require.Equal(t, 0, b.Len())
		_, err = o.EnqueueBatch(struct{}{}, outbox.Message{Topic: "orders"})
		require.Error(t, err)

		for _, commit := range []bool{true, false} {
			tx, err := d.Pool().Begin(ctx)
			require.NoError(t, err)
			b := &pgx.Batch{}
			b.Queue(`SELECT 1`)
			ids, err := o.EnqueueBatch(b,
				outbox.Message{Topic: "orders", Key: []byte("k"), Payload: []byte("1"), Headers: map[string]string{"h": "v"}},
				outbox.Message{Topic: "orders", Key: []byte("k"), Payload: []byte("2")})
			require.NoError(t, err)
			require.Equal(t, 2, len(ids))
			require.Equal(t, 2, b.Len())
			require.NoError(t, tx.SendBatch(ctx, b).Close())
			if commit {
				require.NoError(t, tx.Commit(ctx))
			} else {
				require.NoError(t, tx.Rollback(ctx))
			}
			for i, id := range ids {
				row, err := d.OutboxGet(ctx, id)
				if !commit {
					require.True(t, errors.Is(err, inboxdriver.ErrNotFound), err)
					continue
				}
				require.NoError(t, err)
				require.Equal(t, []byte{'1' + byte(i)}, row.Payload)
				require.Equal(t, ordered, row.KeySeq > 0)
			}
			if commit {
				row, err := d.OutboxGet(ctx, ids[0])
				require.NoError(t, err)
				require.Equal(t, "v", row.Headers["h"])
			}
		}
	}
}
