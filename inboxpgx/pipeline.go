package inboxpgx

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
)

// PipelineFunc is a handler that queues its statements on b instead of
// running them, so that Client.Process sends the message's whole
// transaction in one round trip: BEGIN, the claim, the statements, COMMIT.
// A new message then costs one round trip where BEGIN, the same statements
// and COMMIT written by hand cost three.
//
// The function runs before the claim's outcome is known. It must only
// queue: decode the message, return an error if it cannot (inbox.Permanent
// for a message that no retry will mend), and queue what the message asks
// for. BEGIN, COMMIT and ROLLBACK do not belong in it. The claim is the
// transaction's first statement, a plain INSERT: a duplicate fails it with
// a unique violation, which the server logs, and the server skips the
// statements. After a duplicate the client looks each message up first, in
// one round trip, until one is not there (see inbox.PipelinedHandler).
//
// A queued query may check its result in a callback (QueuedQuery.Exec and
// the like) and return an error, such as for an UPDATE that matched no row:
// the transaction then rolls back. COMMIT then waits for the callbacks, in
// a second round trip. Without callbacks, a failing statement is what rolls
// the transaction back.
//
// Where the statements cannot go with the claim (ProcessBatch, which
// pipelines PipelineBatchFunc, or a message whose work could not be
// described), Handle runs them in the transaction after the claim, as one
// batch.
type PipelineFunc func(ctx context.Context, msg inbox.Message, b *pgx.Batch) error

var _ inbox.PipelinedHandler[pgx.Tx] = PipelineFunc(nil)

// Handle queues msg's statements and runs them in tx, in one round trip.
func (f PipelineFunc) Handle(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
	return runQueued(ctx, tx, func(b *pgx.Batch) error { return f(ctx, msg, b) })
}

// Pipeline implements inbox.PipelinedHandler: it returns msg's statements
// as a *pgx.Batch.
func (f PipelineFunc) Pipeline(ctx context.Context, msg inbox.Message) (any, error) {
	return queued(func(b *pgx.Batch) error { return f(ctx, msg, b) })
}

// queued returns the batch that queue fills.
func queued(queue func(b *pgx.Batch) error) (*pgx.Batch, error) {
	b := &pgx.Batch{}
	if err := queue(b); err != nil {
		return nil, err
	}
	return b, nil
}

// runQueued runs the statements that queue queues in tx, in one round trip.
func runQueued(ctx context.Context, tx pgx.Tx, queue func(b *pgx.Batch) error) error {
	b, err := queued(queue)
	if err != nil || b.Len() == 0 {
		return err
	}
	return tx.SendBatch(ctx, b).Close()
}

// PipelineBatchFunc is PipelineFunc for many messages at once: it queues the
// statements that apply msgs, in order, such as one UPDATE … FROM unnest
// over all of them. ProcessBatch and ProcessBatchOrdered send a batch's
// whole transaction in one round trip: BEGIN, one claim of every id, the
// statements, COMMIT. When a message of the batch is a duplicate, the claim
// fails, the statements do not run, and the batch is claimed on its own and
// its new messages handled with the function, as a BatchHandler's are.
// Process calls the function with the one message.
type PipelineBatchFunc func(ctx context.Context, msgs []inbox.Message, b *pgx.Batch) error

var _ inbox.PipelinedBatchHandler[pgx.Tx] = PipelineBatchFunc(nil)

// Handle runs the statements of msg alone in tx.
func (f PipelineBatchFunc) Handle(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
	return f.HandleBatch(ctx, tx, []inbox.Message{msg})
}

// HandleBatch queues the statements of msgs and runs them in tx, in one
// round trip.
func (f PipelineBatchFunc) HandleBatch(ctx context.Context, tx pgx.Tx, msgs []inbox.Message) error {
	return runQueued(ctx, tx, func(b *pgx.Batch) error { return f(ctx, msgs, b) })
}

// Pipeline implements inbox.PipelinedHandler for msg alone.
func (f PipelineBatchFunc) Pipeline(ctx context.Context, msg inbox.Message) (any, error) {
	return f.PipelineBatch(ctx, []inbox.Message{msg})
}

// PipelineBatch implements inbox.PipelinedBatchHandler: it returns the
// statements of msgs as a *pgx.Batch.
func (f PipelineBatchFunc) PipelineBatch(ctx context.Context, msgs []inbox.Message) (any, error) {
	return queued(func(b *pgx.Batch) error { return f(ctx, msgs, b) })
}

var _ inboxdriver.Pipeliner = (*Driver)(nil)

// ProcessPipelined implements inboxdriver.Pipeliner. work is a *pgx.Batch;
// its queries follow BEGIN and the claim, and COMMIT follows them, in one
// pipelined batch. The claim is a plain INSERT: a duplicate fails it with a
// unique violation, and the server skips the rest of the batch.
func (d *Driver) ProcessPipelined(ctx context.Context, p *inboxdriver.ClaimParams, work any) (claimed bool, workErr, err error) {
	claimed, workErr, err = d.pipeline(ctx, p.LockTimeout, work, func(b *pgx.Batch, opts ...any) *pgx.QueuedQuery {
		return b.Queue(d.q.claimPlain, append(opts, p.Consumer, p.ID)...)
	})
	return claimed, workErr, d.claimError(ctx, []string{p.ID}, err)
}

// ProcessPipelinedBatch implements inboxdriver.Pipeliner: ProcessPipelined
// with one INSERT … SELECT FROM unnest of every id.
func (d *Driver) ProcessPipelinedBatch(ctx context.Context, p *inboxdriver.ClaimBatchParams, work any) (claimed bool, workErr, err error) {
	claimed, workErr, err = d.pipeline(ctx, p.LockTimeout, work, func(b *pgx.Batch, opts ...any) *pgx.QueuedQuery {
		return b.Queue(d.q.claimBatchPlain, append(opts, p.Consumer, p.IDs)...)
	})
	return claimed, workErr, d.claimError(ctx, p.IDs, err)
}

// pipeline sends BEGIN, the claim that claim queues, work's queries and
// COMMIT as one batch on a connection of its own, and ends the transaction
// whatever happens.
func (d *Driver) pipeline(ctx context.Context, lockTimeout time.Duration, work any, claim func(b *pgx.Batch, opts ...any) *pgx.QueuedQuery) (claimed bool, workErr, err error) {
	wb, ok := work.(*pgx.Batch)
	if !ok {
		return false, nil, fmt.Errorf("inboxpgx: pipelined work is a %T, not a *pgx.Batch", work)
	}
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		return false, nil, err
	}
	defer conn.Release()

	// How far the results were read tells whose an error is: before the
	// claim's, the claim's; after the work's last, the commit's.
	var claimRead, restoreRead, workRead bool
	b := &pgx.Batch{}
	b.Queue(d.begin)
	restore := d.queueClaim(b, lockTimeout, func(b *pgx.Batch, opts ...any) {
		claim(b, opts...).Exec(func(pgconn.CommandTag) error {
			claimRead = true
			return nil
		})
	})
	restoreRead = restore == nil
	if restore != nil {
		restore.Exec(func(pgconn.CommandTag) error {
			restoreRead = true
			return nil
		})
	}
	// A query with a callback can still fail the work after the server has
	// run it, so COMMIT waits for the callbacks, in a round trip of its own.
	checked := false
	for _, q := range wb.QueuedQueries {
		checked = checked || q.Fn != nil
	}
	b.QueuedQueries = append(b.QueuedQueries, wb.QueuedQueries...)
	workRead = wb.Len() == 0
	if n := wb.Len(); n > 0 {
		last := wb.QueuedQueries[n-1]
		if fn := last.Fn; fn != nil {
			last.Fn = func(br pgx.BatchResults) error {
				err := fn(br)
				workRead = err == nil
				return err
			}
		} else {
			last.Exec(func(pgconn.CommandTag) error {
				workRead = true
				return nil
			})
		}
	}
	if !checked {
		b.Queue("commit")
	}

	err = conn.SendBatch(ctx, b).Close()
	if err == nil && checked {
		_, err = conn.Exec(ctx, "commit")
	}
	if err == nil {
		return true, nil, nil
	}
	pg := conn.Conn().PgConn()
	if pg.IsClosed() {
		return false, nil, err // the commit's outcome, if it was sent, is unknown
	}
	if pg.TxStatus() != 'I' {
		// The batch stopped in its transaction, which is now aborted.
		if rerr := d.rollbackConn(ctx, conn); rerr != nil {
			return false, nil, fmt.Errorf("%w (and its rollback failed: %v)", err, rerr)
		}
	}
	switch {
	case !claimRead && isUniqueViolation(err):
		return false, nil, nil // a duplicate
	case claimRead && restoreRead && !workRead:
		return true, err, nil
	default:
		return false, nil, err
	}
}

// Applied implements inboxdriver.Pipeliner.
func (d *Driver) Applied(ctx context.Context, p *inboxdriver.ClaimParams) (bool, error) {
	var seen bool
	err := d.pool.QueryRow(ctx, d.q.applied, p.Consumer, p.ID).Scan(&seen)
	return seen, err
}

func isUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505"
}

// rollbackConn rolls back conn's aborted transaction, with a context that
// outlives a cancelled ctx.
func (d *Driver) rollbackConn(ctx context.Context, conn *pgxpool.Conn) error {
	rctx, cancel := cleanupContext(ctx)
	defer cancel()
	_, err := conn.Exec(rctx, "rollback")
	return err
}

// beginSQL is the BEGIN statement of opts, as pgx's BeginTx writes it.
func beginSQL(opts pgx.TxOptions) string {
	if opts.BeginQuery != "" {
		return opts.BeginQuery
	}
	var sb strings.Builder
	sb.WriteString("begin")
	if opts.IsoLevel != "" {
		sb.WriteString(" isolation level " + string(opts.IsoLevel))
	}
	if opts.AccessMode != "" {
		sb.WriteString(" " + string(opts.AccessMode))
	}
	if opts.DeferrableMode != "" {
		sb.WriteString(" " + string(opts.DeferrableMode))
	}
	return sb.String()
}
