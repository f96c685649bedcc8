package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxpgx"
)

// The broker rows (nats-…, rabbitmq-…) send a batch of messages to the
// worker's partition and wait until a consumer that runs for the whole
// run is done with them: an inbox adapter over the Postgres inbox, or a
// bare loop that takes the messages and acknowledges them, with no inbox
// and no database. Both tell the waiting worker at the same point, right
// before they acknowledge: the inbox consumer when its transaction
// committed, the bare loop when it has the messages.

// brokerOpTimeout bounds one operation of a broker row: a consumer that
// stopped, or a broker that went away, fails the row instead of hanging
// the run.
const brokerOpTimeout = 30 * time.Second

// brokerBatch is the largest batch the consumers of the broker rows take.
const brokerBatch = 100

// tracker tells the workers of a broker row when the messages they sent
// are done. It is also the inbox client's Observer: a message is done when
// a transaction that claimed it committed.
type tracker struct {
	mu      sync.Mutex
	waiting map[string]*batchWait
	err     error
	failed  chan struct{}
}

// batchWait is one operation's messages, until they are all done.
type batchWait struct {
	left int
	done chan struct{}
}

func newTracker() *tracker {
	return &tracker{waiting: map[string]*batchWait{}, failed: make(chan struct{})}
}

// expect registers es, before they are sent.
func (t *tracker) expect(es []*effect) *batchWait {
	bw := &batchWait{left: len(es), done: make(chan struct{})}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, e := range es {
		t.waiting[e.msg.ID] = bw
	}
	return bw
}

// done marks the message with id done. Ids no one waits for are ignored.
func (t *tracker) done(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	bw, ok := t.waiting[id]
	if !ok {
		return
	}
	delete(t.waiting, id)
	if bw.left--; bw.left == 0 {
		close(bw.done)
	}
}

// roundTrip registers es, sends them with send, and waits until they are
// all done, the consumer failed, ctx is done, or brokerOpTimeout passed.
func (t *tracker) roundTrip(ctx context.Context, es []*effect, send func(ctx context.Context) error) error {
	bw := t.expect(es)
	defer t.forget(bw, es)
	opCtx, cancel := context.WithTimeout(ctx, brokerOpTimeout)
	defer cancel()
	if err := send(opCtx); err != nil {
		return timedOut(ctx, opCtx, fmt.Errorf("send: %w", err))
	}
	select {
	case <-bw.done:
		return nil
	case <-t.failed:
		t.mu.Lock()
		defer t.mu.Unlock()
		return t.err
	case <-opCtx.Done():
		return timedOut(ctx, opCtx, opCtx.Err())
	}
}

// timedOut names the timeout when the operation's own deadline ended it.
func timedOut(ctx, opCtx context.Context, err error) error {
	if ctx.Err() == nil && opCtx.Err() != nil {
		return fmt.Errorf("a batch was not sent and done in %v: %w", brokerOpTimeout, err)
	}
	return err
}

// forget drops what is left of bw.
func (t *tracker) forget(bw *batchWait, es []*effect) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if bw.left == 0 {
		return
	}
	for _, e := range es {
		if t.waiting[e.msg.ID] == bw {
			delete(t.waiting, e.msg.ID)
		}
	}
}

// fail fails every operation, now and later, with err.
func (t *tracker) fail(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err == nil {
		t.err = err
		close(t.failed)
	}
}

type txMessagesKey struct{}

// TxStart keeps the transaction's messages for TxEnd.
func (t *tracker) TxStart(ctx context.Context, _ string, msgs []inbox.Message) context.Context {
	return context.WithValue(ctx, txMessagesKey{}, msgs)
}

// TxEnd marks the messages of a committed transaction done.
func (t *tracker) TxEnd(ctx context.Context, e *inbox.TxEvent) {
	if e.Err != nil {
		return // a failed batch is retried, or its messages one by one
	}
	msgs, _ := ctx.Value(txMessagesKey{}).([]inbox.Message)
	for _, m := range msgs {
		t.done(m.ID)
	}
}

// DeadLettered fails the row: no message of the run is poison.
func (t *tracker) DeadLettered(_ context.Context, e *inbox.DeadLetterEvent) {
	t.fail(fmt.Errorf("message %s was dead-lettered (%s): %v", e.MessageID, e.Reason, e.Err))
}

var _ inbox.Observer = (*tracker)(nil)

// observedClient returns an inbox client over the run's inbox and pool
// that tells t about its transactions.
func observedClient(b *bench, t *tracker) (*inbox.Client[pgx.Tx], error) {
	d, err := inboxpgx.New(b.pool, &inboxpgx.Config{Tables: inboxdriver.Tables{Schema: b.schema}})
	if err != nil {
		return nil, err
	}
	return inbox.NewClient(d, &inbox.Config{Observer: t})
}

// unavailableError is a resource that cannot be reached: the rows that
// need it are left out of the run, and the report says why, instead of
// the run failing.
type unavailableError struct{ err error }

func (e *unavailableError) Error() string { return e.err.Error() }
func (e *unavailableError) Unwrap() error { return e.err }

func isUnavailable(err error) bool {
	var ue *unavailableError
	return errors.As(err, &ue)
}
