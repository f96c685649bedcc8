package inboxpgx

import (
	"context"
	"errors"
	"fmt"
	"strings"

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
// statements; the client then claims again, first, and reports Duplicate.
// After a duplicate the driver looks each message of the consumer up
// first, in one round trip, until one is not there.
//
// A queued query may check its result in a callback (QueuedQuery.Exec and
// the like) and return an error, such as for an UPDATE that matched no row:
// the transaction then rolls back. COMMIT then waits for the callbacks, in
// a second round trip. Without callbacks, a failing statement is what rolls
// the transaction back.
//
// When the claim cannot go with the statements (a batch with a duplicate,
// a consumer after a duplicate), the statements run in the transaction
// after the claim, as one batch.
type PipelineFunc func(ctx context.Context, msg inbox.Message, b *pgx.Batch) error

var (
	_ inbox.Handler[pgx.Tx] = PipelineFunc(nil)
	_ inboxdriver.Pipelined = PipelineFunc(nil)
)

// Handle queues msg's statements and sends them on tx: in one round trip,
// or with the commit when the driver deferred the claim.
func (f PipelineFunc) Handle(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
	return sendQueued(ctx, tx, func(b *pgx.Batch) error { return f(ctx, msg, b) })
}

// PipelinesOnly implements inboxdriver.Pipelined.
func (PipelineFunc) PipelinesOnly() {}

// sendQueued sends the statements that queue queues on tx.
func sendQueued(ctx context.Context, tx pgx.Tx, queue func(b *pgx.Batch) error) error {
	b := &pgx.Batch{}
	if err := queue(b); err != nil || b.Len() == 0 {
		return err
	}
	return tx.SendBatch(ctx, b).Close()
}

// PipelineBatchFunc is PipelineFunc for many messages at once: it queues the
// statements that apply msgs, in order, such as one UPDATE … FROM unnest
// over all of them. ProcessBatch and ProcessBatchOrdered send a batch's
// whole transaction in one round trip: BEGIN, one claim of every id, the
// statements, COMMIT. Process calls the function with the one message.
type PipelineBatchFunc func(ctx context.Context, msgs []inbox.Message, b *pgx.Batch) error

var (
	_ inbox.BatchHandler[pgx.Tx] = PipelineBatchFunc(nil)
	_ inboxdriver.Pipelined      = PipelineBatchFunc(nil)
)

// Handle sends the statements of msg alone on tx.
func (f PipelineBatchFunc) Handle(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
	return f.HandleBatch(ctx, tx, []inbox.Message{msg})
}

// HandleBatch queues the statements of msgs and sends them on tx.
func (f PipelineBatchFunc) HandleBatch(ctx context.Context, tx pgx.Tx, msgs []inbox.Message) error {
	return sendQueued(ctx, tx, func(b *pgx.Batch) error { return f(ctx, msgs, b) })
}

// PipelinesOnly implements inboxdriver.Pipelined.
func (PipelineBatchFunc) PipelinesOnly() {}

// errQueueOnly is what a deferred transaction answers a handler that does
// more than queue statements.
var errQueueOnly = errors.New("inboxpgx: a pipelined handler may only queue statements on its transaction (SendBatch, with no results read)")

// pipeTx is the transaction of a deferred claim: nothing is sent until
// Commit, which sends BEGIN, the claim, the statements the handler queued
// (with SendBatch) and COMMIT in one round trip.
type pipeTx struct {
	d    *Driver
	p    *inboxdriver.ClaimParams
	work []*pgx.QueuedQuery
	done bool
}

func (t *pipeTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if t.done {
		return pgx.FailedBatchResults(b, pgx.ErrTxClosed)
	}
	t.work = append(t.work, b.QueuedQueries...)
	return queuedResults{}
}

func (t *pipeTx) Begin(context.Context) (pgx.Tx, error) { return nil, errQueueOnly }
func (t *pipeTx) Commit(context.Context) error          { return errQueueOnly }
func (t *pipeTx) Rollback(context.Context) error        { return errQueueOnly }
func (t *pipeTx) CopyFrom(context.Context, pgx.Identifier, []string, pgx.CopyFromSource) (int64, error) {
	return 0, errQueueOnly
}
func (t *pipeTx) LargeObjects() pgx.LargeObjects { return pgx.LargeObjects{} }
func (t *pipeTx) Prepare(context.Context, string, string) (*pgconn.StatementDescription, error) {
	return nil, errQueueOnly
}
func (t *pipeTx) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, errQueueOnly
}
func (t *pipeTx) Query(context.Context, string, ...any) (pgx.Rows, error) { return nil, errQueueOnly }
func (t *pipeTx) QueryRow(context.Context, string, ...any) pgx.Row        { return errRow{} }
func (t *pipeTx) Conn() *pgx.Conn                                         { return nil }

// queuedResults are the results of statements queued on a pipeTx: they
// come with the commit.
type queuedResults struct{}

func (queuedResults) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, errQueueOnly }
func (queuedResults) Query() (pgx.Rows, error)         { return nil, errQueueOnly }
func (queuedResults) QueryRow() pgx.Row                { return errRow{} }
func (queuedResults) Close() error                     { return nil }
func (queuedResults) Tx() pgx.Tx                       { return nil }

type errRow struct{}

func (errRow) Scan(...any) error { return errQueueOnly }

// beginPipelined begins the transaction of a Pipelined handler's claim.
// It defers the claim (a pipeTx), unless the consumer's last deferred
// claim found a duplicate: duplicates come in runs (a replay after a crash
// or a rebalance), and a deferred duplicate costs an error on the server,
// which logs it. During a run one message is looked up first (a committed
// row, which only an applied message leaves, answers Duplicate in one
// round trip; one not found is new, or in flight elsewhere, and goes
// deferred), and a batch is claimed first (ok false: BeginClaim claims).
func (d *Driver) beginPipelined(ctx context.Context, p *inboxdriver.ClaimParams) (tx pgx.Tx, claimed []bool, ok bool, err error) {
	if _, after := d.duplicates.Load(p.Consumer); after {
		if len(p.IDs) > 1 {
			return nil, nil, false, nil
		}
		var seen bool
		if err := d.pool.QueryRow(ctx, d.q.applied, p.Consumer, d.idArg(p.IDs[0])).Scan(&seen); err != nil {
			return nil, nil, true, d.claimError(ctx, p.IDs, err)
		}
		if seen {
			return &pipeTx{d: d, p: p, done: true}, []bool{false}, true, nil
		}
		d.noteDuplicates(p.Consumer, []bool{true})
	}
	return &pipeTx{d: d, p: p}, nil, true, nil
}

// noteDuplicates records whether a claim of consumer's messages found
// duplicates (claimed holds a false): the one place that starts and ends a
// consumer's run of duplicates, during which claims take the forms that a
// duplicate does not fail (see beginPipelined and BeginClaim).
func (d *Driver) noteDuplicates(consumer string, claimed []bool) {
	for _, c := range claimed {
		if !c {
			d.duplicates.Store(consumer, struct{}{})
			return
		}
	}
	d.duplicates.Delete(consumer)
}

// commit sends the deferred transaction: BEGIN, the claim, the queued
// statements and COMMIT as one batch on a connection of its own, and ends
// the transaction whatever happens. The claim is a plain INSERT: a
// duplicate fails it with a unique violation, and the server skips the
// rest of the batch.
func (t *pipeTx) commit(ctx context.Context) error {
	if t.done {
		return pgx.ErrTxClosed
	}
	t.done = true
	d, p := t.d, t.p
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		return d.claimError(ctx, p.IDs, err)
	}
	defer conn.Release()
	bracket, err := d.bracket(ctx, conn.Conn(), p.LockTimeout)
	if err != nil {
		return d.claimError(ctx, p.IDs, err)
	}

	// How far the results were read tells whose an error is: before the
	// claim's, the claim's; after the work's last, the commit's.
	var claimRead, restoreRead, workRead bool
	b := &pgx.Batch{}
	b.Queue(d.begin)
	restore := bracket.queue(b, func(b *pgx.Batch, opts ...any) *pgx.QueuedQuery {
		var q *pgx.QueuedQuery
		if len(p.IDs) == 1 {
			q = b.Queue(d.q.claimPlain, append(opts, p.Consumer, d.idArg(p.IDs[0]))...)
		} else {
			q = b.Queue(d.q.claimBatchPlain, append(opts, p.Consumer, d.idsArg(p.IDs))...)
		}
		q.Exec(func(pgconn.CommandTag) error {
			claimRead = true
			return nil
		})
		return q
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
	for _, q := range t.work {
		checked = checked || q.Fn != nil
	}
	b.QueuedQueries = append(b.QueuedQueries, t.work...)
	workRead = len(t.work) == 0
	if n := len(t.work); n > 0 {
		last := t.work[n-1]
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
	// The batch runs under awaitCommit. The server sends the results of a
	// pipeline when it ends, with the COMMIT's: the bound counts from the
	// send, with the claim's lock wait on top. An abandoned batch keeps
	// the pgx.Conn.
	timeout := d.commitTimeout
	if timeout > 0 {
		timeout += max(p.LockTimeout, 0)
	}
	pc := conn.Conn()
	err, abandoned := awaitCommit(ctx, conn, timeout, func(ctx context.Context) error {
		err := pc.SendBatch(ctx, b).Close()
		if err == nil && checked {
			_, err = pc.Exec(ctx, "commit")
		}
		return err
	})
	if abandoned || err == nil {
		return err
	}
	pg := pc.PgConn()
	if pg.IsClosed() {
		return d.claimError(ctx, p.IDs, err) // the commit's outcome, if it was sent, is unknown
	}
	if pg.TxStatus() != 'I' {
		// The batch stopped in its transaction, which is now aborted.
		if rerr := d.rollbackConn(ctx, conn); rerr != nil {
			return fmt.Errorf("%w (and its rollback failed: %v)", err, rerr)
		}
	}
	switch {
	case !claimRead && isUniqueViolation(err):
		d.noteDuplicates(p.Consumer, []bool{false})
		return inboxdriver.ErrDuplicate
	case claimRead && restoreRead && !workRead:
		return &inboxdriver.WorkError{Err: err}
	default:
		return d.claimError(ctx, p.IDs, err)
	}
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
