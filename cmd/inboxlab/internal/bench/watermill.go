package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/inbox/inboxwatermill"
)

// The Watermill rows: what a Go user who already runs Watermill would
// pick, beside the inbox.
//
//   - watermill-sql-exactly-once: watermill-sql's Postgres subscriber on
//     the same server, the side effect in the subscriber's transaction
//     (wsql.TxFromContext), which commits with the consumer group's
//     offset: exactly-once, with Postgres as the broker. A topic per
//     worker, one subscriber each, as a partitioned broker has. An op
//     publishes the row's batch with watermill-sql's publisher and waits
//     until every message's transaction committed.
//   - watermill-inbox: inboxwatermill.Middleware on a Watermill Router
//     over Go channels, the side effect in the inbox transaction. An op
//     publishes one message and returns once the Router acked it.
//   - watermill-middleware: the same middleware and handler called as the
//     Router calls them, with no pub/sub: beside inbox-handler, which runs
//     the same handler through Client.Process alone, it is what the
//     middleware costs.

// watermillConsumer is the inbox consumer of the Watermill rows.
const watermillConsumer = "bench-watermill"

// watermillSQL is the watermill-sql side of its row.
type watermillSQL struct {
	pub    *wsql.Publisher
	topics []string
	t      *tracker
	gate   gate // holds the subscribers' polls while the resource is quiet
}

var watermillSQLResource = &resource{
	name:       "watermill-sql",
	background: true,
	// Quiet, the subscribers wait in BeginTx instead of polling every
	// 10 ms, eight topics' worth, while kafka-inbox-batch-100 runs.
	quiet: func(b *bench, on bool) {
		if b.watermillSQL != nil {
			b.watermillSQL.gate.close(on)
		}
	},
	open: func(ctx context.Context, b *bench) (func(), error) {
		schema := wsql.DefaultPostgreSQLSchema{
			GenerateMessagesTableName: func(topic string) string { return b.table("watermill_" + topic) },
			// The bench's payloads are binary, not JSON.
			GeneratePayloadType: func(string) string { return "BYTEA" },
			SubscribeBatchSize:  brokerBatch,
		}
		offsets := wsql.DefaultPostgreSQLOffsetsAdapter{
			GenerateMessagesOffsetsTableName: func(topic string) string { return b.table("watermill_offsets_" + topic) },
		}
		w := &watermillSQL{t: newTracker()}
		// The subscribers hold a transaction per message they hand out:
		// a pool of their own, as large as the workers' own.
		pcfg := b.pool.Config()
		pcfg.MinConns = 0
		subPool, err := pgxpool.NewWithConfig(ctx, pcfg)
		if err != nil {
			return nil, err
		}
		logger := watermill.NopLogger{}
		w.pub, err = wsql.NewPublisher(wsql.BeginnerFromPgx(b.pool), wsql.PublisherConfig{SchemaAdapter: schema}, logger)
		if err != nil {
			subPool.Close()
			return nil, err
		}
		sub, err := wsql.NewSubscriber(wsql.BeginnerFromPgx(committer{subPool, w.t, &w.gate}), wsql.SubscriberConfig{
			ConsumerGroup:    "bench",
			PollInterval:     10 * time.Millisecond, // kafka-inbox-batch-100's FetchMaxWait
			ResendInterval:   10 * time.Millisecond,
			RetryInterval:    10 * time.Millisecond,
			SchemaAdapter:    schema,
			OffsetsAdapter:   offsets,
			InitializeSchema: true,
		}, logger)
		if err != nil {
			subPool.Close()
			return nil, err
		}
		r, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, logger)
		if err != nil {
			subPool.Close()
			return nil, err
		}
		for i := range b.maxW {
			topic := fmt.Sprintf("bench_%d", i)
			w.topics = append(w.topics, topic)
			if err := sub.SubscribeInitialize(topic); err != nil {
				subPool.Close()
				return nil, err
			}
			r.AddConsumerHandler("watermill-sql-"+topic, topic, sub, func(msg *message.Message) error {
				return w.handle(b, msg)
			})
		}
		stop, err := runWatermillRouter(ctx, r)
		if err != nil {
			subPool.Close()
			return nil, err
		}
		b.watermillSQL = w
		return func() {
			w.gate.close(false)
			stop()
			_ = sub.Close()
			subPool.Close()
		}, nil
	},
}

// handle applies msg's effect in the subscriber's transaction, and marks
// the message for the tracker when that transaction commits.
func (w *watermillSQL) handle(b *bench, msg *message.Message) error {
	tx, ok := wsql.TxFromContext(msg.Context())
	if !ok {
		return errors.New("watermill-sql: no transaction in the message's context")
	}
	account, amount, err := decodeEffect(msg.Payload)
	if err != nil {
		w.t.fail(err)
		return err
	}
	if _, err := tx.ExecContext(msg.Context(), b.pg.update, amount, account); err != nil {
		return err
	}
	if ptx, ok := tx.(*wsql.PgxTx); ok {
		if ct, ok := ptx.Tx.(*committingTx); ok {
			ct.ids = append(ct.ids, msg.UUID)
			return nil
		}
	}
	err = fmt.Errorf("watermill-sql: the transaction is a %T, not the bench's", tx)
	w.t.fail(err)
	return err
}

// committer is the subscribers' pool: its transactions tell the tracker
// which messages they committed, and none begins while the gate is
// closed.
type committer struct {
	*pgxpool.Pool
	t    *tracker
	gate *gate
}

func (c committer) BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error) {
	if err := c.gate.wait(ctx); err != nil {
		return nil, err
	}
	tx, err := c.Pool.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &committingTx{Tx: tx, t: c.t}, nil
}

// gate holds its callers while it is closed. The zero gate is open.
type gate struct {
	mu     sync.Mutex
	closed chan struct{} // nil while open; closed when the gate opens
}

// close closes the gate (on) or opens it.
func (g *gate) close(on bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case on && g.closed == nil:
		g.closed = make(chan struct{})
	case !on && g.closed != nil:
		close(g.closed)
		g.closed = nil
	}
}

// wait returns once the gate is open, or ctx is done.
func (g *gate) wait(ctx context.Context) error {
	g.mu.Lock()
	ch := g.closed
	g.mu.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// committingTx marks its messages done once it committed.
type committingTx struct {
	pgx.Tx
	t   *tracker
	ids []string
}

func (c *committingTx) Commit(ctx context.Context) error {
	if err := c.Tx.Commit(ctx); err != nil {
		return err
	}
	for _, id := range c.ids {
		c.t.done(id)
	}
	return nil
}

// watermillSQLExactlyOnce publishes the row's batch to the worker's topic
// and waits until the subscriber committed every message.
func watermillSQLExactlyOnce(ctx context.Context, b *bench, w *worker) error {
	es := w.next(b, w.batch)
	ws := b.watermillSQL
	return ws.t.roundTrip(ctx, w, es, func(ctx context.Context) error {
		msgs := make([]*message.Message, len(es))
		for i, e := range es {
			msgs[i] = message.NewMessage(e.msg.ID, e.msg.Payload)
			msgs[i].SetContext(ctx)
		}
		return ws.pub.Publish(ws.topics[w.index%len(ws.topics)], msgs...)
	})
}

// watermillInbox is the Router of the watermill-inbox row.
type watermillInbox struct {
	pubsub *gochannel.GoChannel
	topics []string
	// direct is the middleware over the handler, for watermill-middleware.
	direct message.HandlerFunc
}

var watermillInboxResource = &resource{
	name: "watermill-inbox",
	open: func(ctx context.Context, b *bench) (func(), error) {
		logger := watermill.NopLogger{}
		w := &watermillInbox{pubsub: gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, logger)}
		mw := inboxwatermill.Middleware(b.pg.client, watermillConsumer, nil)
		handler := func(msg *message.Message) ([]*message.Message, error) {
			tx, ok := inboxwatermill.TxFromContext[pgx.Tx](msg.Context())
			if !ok {
				return nil, errors.New("no inbox transaction in the message's context")
			}
			account, amount, err := decodeEffect(msg.Payload)
			if err != nil {
				return nil, err
			}
			_, err = tx.Exec(msg.Context(), b.pg.update, amount, account)
			return nil, err
		}
		w.direct = mw(handler)
		r, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, logger)
		if err != nil {
			return nil, err
		}
		for i := range b.maxW {
			topic := fmt.Sprintf("bench_%d", i)
			w.topics = append(w.topics, topic)
			h := r.AddConsumerHandler("watermill-inbox-"+topic, topic, w.pubsub, func(msg *message.Message) error {
				_, err := handler(msg)
				return err
			})
			h.AddMiddleware(mw)
		}
		stop, err := runWatermillRouter(ctx, r)
		if err != nil {
			return nil, err
		}
		b.watermillInbox = w
		return func() {
			stop()
			_ = w.pubsub.Close()
		}, nil
	},
}

// watermillRouterInbox publishes one message to the worker's topic; the
// publish returns once the Router acked it, after the inbox committed.
func watermillRouterInbox(ctx context.Context, b *bench, w *worker) error {
	e := w.next(b, 1)[0]
	wi := b.watermillInbox
	msg := message.NewMessage(e.msg.ID, e.msg.Payload)
	msg.SetContext(ctx)
	return wi.pubsub.Publish(wi.topics[w.index%len(wi.topics)], msg)
}

// watermillMiddleware calls the middleware over the handler, as the Router
// does, with no pub/sub.
func watermillMiddleware(ctx context.Context, b *bench, w *worker) error {
	e := w.next(b, 1)[0]
	msg := message.NewMessage(e.msg.ID, e.msg.Payload)
	msg.SetContext(ctx)
	_, err := b.watermillInbox.direct(msg)
	return err
}

// runWatermillRouter runs r until the returned stop is called, and waits
// until its handlers subscribed.
func runWatermillRouter(ctx context.Context, r *message.Router) (stop func(), err error) {
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	select {
	case <-r.Running():
	case err := <-done:
		cancel()
		return nil, fmt.Errorf("watermill router stopped: %w", err)
	case <-ctx.Done():
		cancel()
		<-done
		return nil, ctx.Err()
	}
	return func() {
		cancel()
		<-done
	}, nil
}

// watermillRatios are the Watermill rows' targets.
func (r *Report) watermillRatios(get func(name string, workers int) *Result) []Ratio {
	var out []Ratio
	for _, w := range []int{1, 8} {
		x, y := get("kafka-inbox-batch-100", w), get("watermill-sql-exactly-once", w)
		if x == nil || y == nil || y.MsgsPerS == 0 {
			continue
		}
		v := rateRatio(x, y)
		out = append(out, Ratio{Name: fmt.Sprintf("kafka-inbox-batch-100 ÷ watermill-sql-exactly-once, msgs/s at %d %s (≥ 5)", w, workersWord(w)),
			Value: round2(v), Want: 5, Met: v >= 5})
	}
	// The middleware's cost: Client.Process alone (inbox-handler) over the
	// same Process and handler under the middleware, in time per message.
	x, y := get("inbox-handler", 1), get("watermill-middleware", 1)
	if x != nil && y != nil && y.MsgsPerS > 0 {
		v := rateRatio(x, y)
		out = append(out, Ratio{Name: "inbox-handler ÷ watermill-middleware, msgs/s at 1 worker (≤ 1.10: at most 10% added)",
			Value: round2(v), Want: 1.10, Met: v <= 1.10, LessIsBetter: true})
	}
	return out
}
