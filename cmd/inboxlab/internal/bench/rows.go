package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/inbox"
)

// row is one line of the results: one way of applying the side effect to
// messages. Its op applies one operation's worth of messages (batch of
// them) for a worker, and returns an error only when something failed: a
// duplicate that is skipped as the row intends is a success.
//
// To add a row, write its op as one small function, add it to rows, and
// list in needs whatever it has to open first (a resource: a Redis client,
// a SQLite file, a Kafka cluster). The runner warms it up, times it at each
// worker count in every round, and reports it.
type row struct {
	name string
	// batch is how many messages one op applies.
	batch int
	// postgres marks a row whose side effect goes to the Postgres server
	// under test, so that its WAL per message is measured.
	postgres bool
	// inbox marks a row that writes the Postgres inbox table, so that the
	// inbox's bytes per row are reported with it.
	inbox bool
	// optional rows run only when --rows names them.
	optional bool
	// timed marks a broker's inbox row, whose consumer's transactions
	// the bench times (txClock).
	timed bool
	// needs are opened before the first row runs.
	needs []*resource
	op    func(ctx context.Context, b *bench, w *worker) error
}

// resource is something rows need opened once per run: a client, a
// database file, a broker. open returns the function that closes it.
type resource struct {
	name string
	open func(ctx context.Context, b *bench) (close func(), err error)
	// background marks a resource that works while it is open, whatever
	// row runs: a broker in this process, consumers that poll. It is
	// opened only for the rows that need it (runRows), so that it takes
	// no CPU from the others' measurements.
	background bool
	// quiet, when set, stops a background resource's own work (polling)
	// while a row that does not need it runs in its phase, and starts it
	// again before a row that does: a ratio group's rows share a phase, and
	// each is measured without paying for the other's idle consumers.
	quiet func(b *bench, on bool)
}

// rows are every row, in the order of the results.
var rows = []*row{
	{name: "bare", batch: 1, postgres: true, op: bare},
	{name: "check-then-insert", batch: 1, postgres: true, op: checkThenInsert},
	{name: "redis-setnx", batch: 1, postgres: true, needs: []*resource{redisResource}, op: redisSetNX},
	{name: "inbox", batch: 1, postgres: true, inbox: true, op: inboxOne},
	{name: "inbox-handler", batch: 1, postgres: true, inbox: true, op: inboxOneTx},
	// inbox-handler's statements by hand, without the library (floor.go).
	{name: "bare-claim", batch: 1, postgres: true, inbox: true, op: bareClaim},
	{name: "inbox-batch-10", batch: 10, postgres: true, inbox: true, op: inboxBatch},
	{name: "inbox-batch-100", batch: 100, postgres: true, inbox: true, op: inboxBatch},
	{name: "inbox-batch-1000", batch: 1000, postgres: true, inbox: true, op: inboxBatch},
	{name: "inbox-duplicate", batch: 1, postgres: true, inbox: true, op: inboxDuplicate},
	{name: "inbox-sqlite", batch: 1, needs: []*resource{sqliteResource}, op: inboxSQLite},
	{name: "inbox-sqlite-batch-100", batch: 100, needs: []*resource{sqliteResource}, op: inboxSQLiteBatch},
	// The bare row's transaction with events enqueued in the outbox: what
	// the outbox costs a producer.
	{name: "outbox-enqueue-1", batch: 1, postgres: true, needs: []*resource{outboxResource}, op: outboxEnqueue(1)},
	// outbox-enqueue-1's statements by hand, without the library (floor.go).
	{name: "bare-enqueue", batch: 1, postgres: true, op: bareEnqueue},
	{name: "outbox-enqueue-10", batch: 1, postgres: true, needs: []*resource{outboxResource}, op: outboxEnqueue(10)},
	{name: "outbox-enqueue-100", batch: 1, postgres: true, needs: []*resource{outboxResource}, op: outboxEnqueue(100)},
	{name: "outbox-enqueue-tx-1", batch: 1, postgres: true, needs: []*resource{outboxResource}, op: outboxEnqueueTx},
	// Each broker's inbox row runs beside a bare ack loop on the same
	// broker: the same messages taken and acknowledged, with no inbox and
	// no database.
	{name: "kafka-bare-ack", batch: brokerBatch, needs: []*resource{kafkaResource}, op: kafkaBareAck},
	{name: "kafka-inbox-batch-100", batch: 100, postgres: true, inbox: true, needs: []*resource{kafkaResource}, timed: true, op: kafkaInboxBatch},
	{name: "nats-bare-ack", batch: brokerBatch, needs: []*resource{natsResource}, op: natsBareAck},
	{name: "nats-inbox-batch-100", batch: brokerBatch, postgres: true, inbox: true, needs: []*resource{natsResource}, timed: true, op: natsInboxBatch},
	{name: "rabbitmq-bare-ack", batch: brokerBatch, needs: []*resource{rabbitResource}, op: rabbitBareAck},
	{name: "rabbitmq-inbox-batch-100", batch: brokerBatch, postgres: true, inbox: true, needs: []*resource{rabbitResource}, timed: true, op: rabbitInboxBatch},
	// inbox-batch-100 again, in each broker's phase (its ratio group),
	// with the broker quiet: the store's batch claim measured round by
	// round beside the broker's rows, not minutes before them.
	{name: "kafka-phase-inbox-batch-100", batch: 100, postgres: true, inbox: true, op: inboxBatch},
	{name: "nats-phase-inbox-batch-100", batch: 100, postgres: true, inbox: true, op: inboxBatch},
	{name: "rabbitmq-phase-inbox-batch-100", batch: 100, postgres: true, inbox: true, op: inboxBatch},
	// Watermill's exactly-once answer beside the inbox on a Watermill
	// Router, and the middleware's cost (watermill.go).
	{name: "watermill-sql-exactly-once", batch: brokerBatch, postgres: true, needs: []*resource{watermillSQLResource}, op: watermillSQLExactlyOnce},
	{name: "watermill-inbox", batch: 1, postgres: true, inbox: true, needs: []*resource{watermillInboxResource}, op: watermillRouterInbox},
	{name: "watermill-middleware", batch: 1, postgres: true, inbox: true, needs: []*resource{watermillInboxResource}, op: watermillMiddleware},
	// The batch rows above apply a batch's effects with one statement, a
	// BatchHandler. This one calls the one-message handler for each
	// message, one round trip each, for comparison.
	{name: "inbox-batch-100-per-message", batch: 100, postgres: true, inbox: true, optional: true, op: inboxBatchPerMessage},
}

// RowNames returns the names of the rows a run makes by default, in the
// order of the results.
func RowNames() []string {
	var names []string
	for _, r := range rows {
		if !r.optional {
			names = append(names, r.name)
		}
	}
	return names
}

// Names returns the names Config.Rows takes for a run's default rows:
// RowNames, then the drain rows'.
func Names() []string {
	names := RowNames()
	for _, d := range drainRows {
		names = append(names, d.name)
	}
	return names
}

func findRow(name string) *row {
	for _, r := range rows {
		if r.name == name {
			return r
		}
	}
	return nil
}

// selectRows returns the rows cfg asks for, in table order. An empty
// RedisAddr leaves out the rows that need Redis, and an empty AMQPURL those
// that need RabbitMQ.
func selectRows(cfg Config) []*row {
	var out []*row
	for _, r := range rows {
		if len(cfg.Rows) > 0 && !contains(cfg.Rows, r.name) || len(cfg.Rows) == 0 && r.optional {
			continue
		}
		if cfg.RedisAddr == "" && needs(r, redisResource) || cfg.AMQPURL == "" && needs(r, rabbitResource) {
			continue
		}
		out = append(out, r)
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func needs(r *row, res *resource) bool {
	for _, n := range r.needs {
		if n == res {
			return true
		}
	}
	return false
}

// consumer is the consumer name of every inbox row.
const consumer = "bench"

// bare applies the effect with no dedup: BEGIN; UPDATE; COMMIT, as a user
// writes it with pgx. A redelivery applies it again.
func bare(ctx context.Context, b *bench, w *worker) error {
	e := w.next(b, 1)[0]
	return b.pg.applyBare(ctx, b.pool, e)
}

// checkThenInsert looks for the id, then inserts it, in the transaction of
// the effect. It is the hand-rolled pattern the design forbids: two
// concurrent deliveries both find nothing, and one of them fails on the
// unique key instead of skipping.
func checkThenInsert(ctx context.Context, b *bench, w *worker) error {
	e := w.next(b, 1)[0]
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		return err
	}
	if err := checkThenInsertTx(ctx, b, tx, e); err != nil {
		rollback(ctx, tx)
		return err
	}
	return nil
}

func checkThenInsertTx(ctx context.Context, b *bench, tx pgx.Tx, e *effect) error {
	var one int
	err := tx.QueryRow(ctx, b.pg.checkSelect, consumer, e.msg.ID).Scan(&one)
	switch {
	case err == nil:
		return tx.Rollback(ctx) // seen before: skip
	case !errors.Is(err, pgx.ErrNoRows):
		return err
	}
	if _, err := tx.Exec(ctx, b.pg.checkInsert, consumer, e.msg.ID); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, b.pg.update, e.amount, e.account); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// redisSetNX marks the id in Redis with SETNX, then applies the effect in
// its own SQL transaction: an unsafe pattern, with the skip and the effect
// in two systems, where a crash between the two forgets the effect.
func redisSetNX(ctx context.Context, b *bench, w *worker) error {
	e := w.next(b, 1)[0]
	first, err := b.redis.client.SetNX(ctx, b.redis.prefix+e.msg.ID, "1", redisTTL)
	if err != nil {
		return err
	}
	if !first {
		return nil // seen before: skip
	}
	return b.pg.applyBare(ctx, b.pool, e)
}

// inboxOne processes one message per transaction with Client.Process and
// the pipelined handler: BEGIN, the claim and the UPDATE in one round trip,
// then COMMIT.
func inboxOne(ctx context.Context, b *bench, w *worker) error {
	return process(ctx, b.pg.client, b.pg.handler, w.next(b, 1)[0], inbox.Applied)
}

// inboxOneTx is inboxOne with a handler that runs the UPDATE on the
// transaction: BEGIN and the claim, the UPDATE, COMMIT.
func inboxOneTx(ctx context.Context, b *bench, w *worker) error {
	return process(ctx, b.pg.client, b.pg.txHandler, w.next(b, 1)[0], inbox.Applied)
}

// process processes e with client and h in a transaction of its own, and
// checks that the outcome is want.
func process[TTx any](ctx context.Context, client *inbox.Client[TTx], h inbox.Handler[TTx], e *effect, want inbox.Outcome) error {
	out, err := client.Process(ctx, consumer, e.msg, h)
	if err != nil {
		return err
	}
	if out != want {
		return fmt.Errorf("message %s: got %v, want %v", e.msg.ID, out, want)
	}
	return nil
}

// inboxBatch processes the row's batch of messages in one transaction with
// Client.ProcessBatch, applying their effects with one statement.
func inboxBatch(ctx context.Context, b *bench, w *worker) error {
	es := w.next(b, w.batch)
	return b.pg.processBatch(ctx, w, es, inbox.Applied, true)
}

// inboxBatchPerMessage is inboxBatch with the one-message handler.
func inboxBatchPerMessage(ctx context.Context, b *bench, w *worker) error {
	es := w.next(b, w.batch)
	return b.pg.processBatch(ctx, w, es, inbox.Applied, false)
}

// inboxDuplicate processes a message whose id the inbox already holds, with
// the handler of the inbox row: the skip path. The first duplicate of a run
// fails its pipelined claim; the ones after it are looked up first and
// found.
func inboxDuplicate(ctx context.Context, b *bench, w *worker) error {
	return process(ctx, b.pg.client, b.pg.handler, w.duplicate(b), inbox.Duplicate)
}

// rollback rolls tx back if it is still open, with a context that outlives
// a cancelled ctx.
func rollback(ctx context.Context, tx pgx.Tx) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = tx.Rollback(rctx)
}
