package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/cmd/inboxlab/internal/broker"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/internal/command"
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
// a transaction that claimed it committed; and it passes the
// transactions on to clock, when set.
type tracker struct {
	mu      sync.Mutex
	waiting map[string]*batchWait
	err     error
	failed  chan struct{}
	clock   *txClock
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

// roundTrip registers es, sends them with send, and waits until the
// batch that w's previous op sent is done (pipeline): each worker of a
// broker row keeps two batches in flight, so that a consumer always has
// the next batch waiting while it finishes one, as under a backlog.
func (t *tracker) roundTrip(ctx context.Context, w *worker, es []*effect, send func(ctx context.Context) error) error {
	bw := t.expect(es)
	ids := make([]string, len(es))
	for i, e := range es {
		ids[i] = e.msg.ID
	}
	sendCtx, cancel := context.WithTimeout(ctx, brokerOpTimeout)
	defer cancel()
	if err := send(sendCtx); err != nil {
		t.forget(bw, ids)
		return timedOut(ctx, sendCtx, fmt.Errorf("send: %w", err))
	}
	return w.pipeline(ctx, func(ctx context.Context) error {
		defer t.forget(bw, ids)
		opCtx, cancel := context.WithTimeout(ctx, brokerOpTimeout)
		defer cancel()
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
	})
}

// timedOut names the timeout when the operation's own deadline ended it.
func timedOut(ctx, opCtx context.Context, err error) error {
	if ctx.Err() == nil && opCtx.Err() != nil {
		return fmt.Errorf("a batch was not sent and done in %v: %w", brokerOpTimeout, err)
	}
	return err
}

// forget drops what is left of bw, whose messages have ids.
func (t *tracker) forget(bw *batchWait, ids []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if bw.left == 0 {
		return
	}
	for _, id := range ids {
		if t.waiting[id] == bw {
			delete(t.waiting, id)
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
	if t.clock != nil {
		t.clock.TxEnd(ctx, e)
	}
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
// that tells obs about its transactions.
func observedClient(b *bench, obs inbox.Observer) (*inbox.Client[pgx.Tx], error) {
	d, err := inboxpgx.New(b.pool, &inboxpgx.Config{Tables: inboxdriver.Tables{Schema: b.schema}})
	if err != nil {
		return nil, err
	}
	return inbox.NewClient(d, &inbox.Config{Observer: obs})
}

// lane is one broker row's destinations (subjects, queues), one per
// worker, and its tracker.
type lane struct {
	names []string
	t     *tracker
}

// newLane is a lane of b's workers, whose destinations are named prefix
// and the worker's index.
func newLane(b *bench, prefix string) lane {
	l := lane{names: make([]string, b.maxW), t: newTracker()}
	l.t.clock = &b.txs
	for i := range l.names {
		l.names[i] = prefix + strconv.Itoa(i)
	}
	return l
}

// messages are es as a broker row sends them.
func messages(es []*effect) []broker.Message {
	msgs := make([]broker.Message, len(es))
	for i, e := range es {
		msgs[i] = broker.Message{ID: e.msg.ID, Body: e.msg.Payload}
	}
	return msgs
}

// bareLoop is what a consumer without an inbox does, batched the way the
// inbox adapters batch: take what p polls, tell t, and acknowledge it,
// until ctx is done.
func bareLoop(ctx context.Context, p broker.Poller, t *tracker) error {
	for {
		ds, err := p.Poll(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			return err
		}
		for _, d := range ds {
			t.done(d.ID)
		}
		if err := p.Ack(ctx, ds); err != nil && ctx.Err() == nil {
			return err
		}
	}
}

// sender sends a broker row's messages to a destination of a lane, from
// the worker's part of the run.
type sender interface {
	send(ctx context.Context, part int, dest string, msgs []broker.Message) error
}

// laneTrip sends the row's batch to the worker's destination of l, and
// waits until l's consumer is done with the batch the worker sent before
// (roundTrip): one op is a batch through the broker, the consumer and,
// for an inbox row, the commit.
func laneTrip(ctx context.Context, b *bench, w *worker, s sender, l *lane) error {
	es := w.next(b, w.batch)
	part := w.index % b.maxW
	return l.t.roundTrip(ctx, w, es, func(ctx context.Context) error { return s.send(ctx, part, l.names[part], messages(es)) })
}

// runner is an inbox adapter's consumer.
type runner interface {
	Run(ctx context.Context) error
}

// startLanes starts the consumers of a pair of broker rows, for as long as
// the resource is open: the inbox adapter's consumer that newInbox makes
// for each destination of in, over client, the run's inbox, which tells
// in's tracker about its transactions; and a bare ack loop over the
// consumer that subscribe starts for each destination of bare.
func startLanes(ctx context.Context, b *bench, c *cleanup, in, bare *lane,
	newInbox func(client *inbox.Client[pgx.Tx], dest string) (runner, error), subscribe func(dest string) (broker.Poller, error),
) error {
	client, err := observedClient(b, in.t)
	if err != nil {
		return err
	}
	// The bare loops' consumers, closed once the loops stopped.
	pollers := make([]broker.Poller, len(bare.names))
	for i, dest := range bare.names {
		p, err := subscribe(dest)
		if err != nil {
			return err
		}
		c.add(p.Close)
		pollers[i] = p
	}
	run := c.background(ctx)
	for _, dest := range in.names {
		consumer, err := newInbox(client, dest)
		if err != nil {
			return err
		}
		run("the inbox consumer of "+dest, in.t.fail, consumer.Run)
	}
	for i, p := range pollers {
		run("the bare ack loop of "+bare.names[i], bare.t.fail, func(ctx context.Context) error { return bareLoop(ctx, p, bare.t) })
	}
	return nil
}

// cleanup is what a resource opened, closed in the reverse order.
type cleanup []func()

// openWith runs open with a cleanup, which it runs if open fails, and
// returns otherwise as the resource's close.
func openWith(open func(c *cleanup) error) (func(), error) {
	var c cleanup
	if err := open(&c); err != nil {
		c.run()
		return nil, err
	}
	return c.run, nil
}

func (c *cleanup) add(f func()) { *c = append(*c, f) }

func (c cleanup) run() {
	for i := len(c) - 1; i >= 0; i-- {
		c[i]()
	}
}

// cleanedQueues records, for the line of an interrupted run
// (command.Cleaned), what a broker's cleanup said: the queues it deleted as
// one count under the pattern of their names, and whatever else it said,
// such as a queue it could not delete, as it said it.
func cleanedQueues(ctx context.Context, server, pattern string, said []string) {
	deleted := 0
	for _, s := range said {
		if strings.HasPrefix(s, "deleted queue ") {
			deleted++
			continue
		}
		command.Cleaned(ctx, "%s", s)
	}
	if deleted > 0 {
		command.Cleaned(ctx, "deleted %s %s", command.Count(deleted, server+" queue", server+" queues"), pattern)
	}
}

// background returns a function that runs a consumer of a broker row in
// a goroutine, for as long as the resource is open, and hands its failure
// to fail; the cleanup stops them all and waits for them.
func (c *cleanup) background(ctx context.Context) func(what string, fail func(error), run func(context.Context) error) {
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	var running sync.WaitGroup
	c.add(func() { stop(); running.Wait() })
	return func(what string, fail func(error), run func(context.Context) error) {
		running.Go(func() {
			if err := run(runCtx); err != nil {
				fail(fmt.Errorf("%s: %w", what, err))
			}
		})
	}
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
