package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/inbox/internal/uuid"
)

// The floors: the statements of inbox-handler and of outbox-enqueue-1 sent
// by hand with pgx, with nothing of the library between. Beside bare, a
// floor is what Postgres itself charges for the claim or the enqueue, which
// no client can send for less; beside a floor, the library's row is what
// the library adds to it.
//
//   - bare-claim: BEGIN and the claim's INSERT in one batch, the UPDATE,
//     COMMIT: inbox-handler's three round trips and its statements, the id
//     in binary as inboxpgx sends it.
//   - bare-enqueue: bare's transaction with the INSERT of the row that
//     Outbox.EnqueueBatch writes for one event, in one batch with the
//     UPDATE: outbox-enqueue-1's round trips and statements.

// bareClaim is the op of the bare-claim row.
func bareClaim(ctx context.Context, b *bench, w *worker) error {
	e := w.next(b, 1)[0]
	id, ok := uuid.Parse(e.msg.ID)
	if !ok {
		return fmt.Errorf("message id %q is not a UUID", e.msg.ID)
	}
	conn, err := b.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	batch := &pgx.Batch{}
	batch.BeginTx(pgx.TxOptions{})
	batch.Queue(b.pg.floorClaim, consumer, id)
	br := conn.SendBatch(ctx, batch)
	tx := br.Tx()
	if err := br.Close(); err != nil {
		rollback(ctx, tx)
		return err
	}
	if _, err := tx.Exec(ctx, b.pg.update, e.amount, e.account); err != nil {
		rollback(ctx, tx)
		return err
	}
	return tx.Commit(ctx)
}

// bareEnqueue is the op of the bare-enqueue row.
func bareEnqueue(ctx context.Context, b *bench, w *worker) error {
	e := w.next(b, 1)[0]
	msg := outboxMessages(e, 1)[0]
	now := time.Now()
	id, _ := uuid.Parse(uuid.V7(now))
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		return err
	}
	batch := &pgx.Batch{}
	batch.Queue(b.pg.update, e.amount, e.account)
	batch.Queue(b.pg.floorEnqueue, id, msg.Topic, msg.Key, msg.Payload, now)
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		rollback(ctx, tx)
		return err
	}
	return tx.Commit(ctx)
}
