package bench

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxrabbit"
)

// DefaultAMQPURL is the machine's RabbitMQ, for the rabbitmq-… rows.
const DefaultAMQPURL = "amqp://guest:guest@127.0.0.1:5672/"

// rabbitDialTimeout bounds a dial of the RabbitMQ rows, so that a server
// that does not answer leaves them out quickly.
const rabbitDialTimeout = 5 * time.Second

// rabbitStore is the RabbitMQ side of the rabbitmq-inbox-batch-100 and
// rabbitmq-bare-ack rows, on the server at Config.AMQPURL: per worker a
// queue for each row, as a stream partitioned by account key is consumed,
// and a producer channel in confirm mode. The queues are durable, named
// after the run's random schema (<schema>.inbox.<worker>,
// <schema>.bare.<worker>), and deleted at the end of the run, or by the
// server after ten idle minutes if the run dies.
type rabbitStore struct {
	url string
	// channels are the producer's, one per worker, in confirm mode.
	channels []*amqp.Channel
	// bareConns are the bare loops' connections, one per worker.
	bareConns []*amqp.Connection
	inbox     rabbitLane
	bare      rabbitLane
}

// rabbitLane is one row's queues, one per worker, and its tracker.
type rabbitLane struct {
	queues []string
	t      *tracker
}

var rabbitResource = &resource{
	name:       "rabbitmq",
	background: true,
	open: func(ctx context.Context, b *bench) (func(), error) {
		r := &rabbitStore{url: b.cfg.AMQPURL, inbox: rabbitLane{t: newTracker()}, bare: rabbitLane{t: newTracker()}}
		var closers []func()
		closeAll := func() {
			for i := len(closers) - 1; i >= 0; i-- {
				closers[i]()
			}
		}
		if err := r.start(b, &closers); err != nil {
			closeAll()
			return nil, err
		}
		runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
		var running sync.WaitGroup
		closers = append(closers, func() { stop(); running.Wait() })
		if err := r.startInbox(runCtx, b, &running); err != nil {
			closeAll()
			return nil, err
		}
		if err := r.startBare(runCtx, &running); err != nil {
			closeAll()
			return nil, err
		}
		b.rabbit = r
		return closeAll, nil
	},
}

func (r *rabbitStore) dial() (*amqp.Connection, error) {
	return amqp.DialConfig(r.url, amqp.Config{Dial: amqp.DefaultDial(rabbitDialTimeout)})
}

// where names the server of r without its password.
func (r *rabbitStore) where() string {
	u, err := url.Parse(r.url)
	if err != nil {
		return "(unparsable AMQP URL)"
	}
	return u.Redacted()
}

// start connects the producer and declares the queues. A server that
// cannot be reached is unavailable: the rows are left out.
func (r *rabbitStore) start(b *bench, closers *[]func()) error {
	conn, err := r.dial()
	if err != nil {
		return &unavailableError{fmt.Errorf("cannot reach RabbitMQ at %s: %w", r.where(), err)}
	}
	*closers = append(*closers, func() { conn.Close() })
	admin, err := conn.Channel()
	if err != nil {
		return err
	}
	// Named after the run's schema, so that they can be found.
	prefix := b.schema
	for i := range b.maxW {
		r.inbox.queues = append(r.inbox.queues, prefix+".inbox."+strconv.Itoa(i))
		r.bare.queues = append(r.bare.queues, prefix+".bare."+strconv.Itoa(i))
	}
	// Deleted at the end, before the connection closes.
	*closers = append(*closers, func() {
		for _, q := range append(append([]string(nil), r.inbox.queues...), r.bare.queues...) {
			if _, err := admin.QueueDelete(q, false, false, false); err != nil {
				b.logf("rabbitmq: delete queue %s: %v", q, err)
				return
			}
		}
	})
	for _, q := range append(append([]string(nil), r.inbox.queues...), r.bare.queues...) {
		if _, err := admin.QueueDeclare(q, true, false, false, false, amqp.Table{"x-expires": int32(10 * 60 * 1000)}); err != nil {
			return fmt.Errorf("declare queue %s: %w", q, err)
		}
	}
	for range b.maxW {
		ch, err := conn.Channel()
		if err == nil {
			err = ch.Confirm(false)
		}
		if err != nil {
			return fmt.Errorf("open a producer channel: %w", err)
		}
		r.channels = append(r.channels, ch)
	}
	for range r.bare.queues {
		c, err := r.dial()
		if err != nil {
			return err
		}
		*closers = append(*closers, func() { c.Close() })
		r.bareConns = append(r.bareConns, c)
	}
	return nil
}

// startInbox runs an inboxrabbit consumer per queue of the inbox row, at
// batch 100, over the Postgres inbox with the batch rows' handler. Each
// dials a connection of its own.
func (r *rabbitStore) startInbox(runCtx context.Context, b *bench, running *sync.WaitGroup) error {
	client, err := observedClient(b, r.inbox.t)
	if err != nil {
		return err
	}
	for _, q := range r.inbox.queues {
		c, err := inboxrabbit.New[pgx.Tx](func(context.Context) (*amqp.Connection, error) { return r.dial() }, client, b.pg.batchHandler, &inboxrabbit.Config{
			Queue:           q,
			Consumer:        "bench-rabbitmq",
			Key:             inbox.HeaderKey(inboxrabbit.HeaderEventID),
			Workers:         1,
			Batch:           brokerBatch,
			ShutdownTimeout: 5 * time.Second,
		})
		if err != nil {
			return err
		}
		running.Go(func() {
			if err := c.Run(runCtx); err != nil {
				r.inbox.t.fail(fmt.Errorf("inboxrabbit consumer of %s: %w", q, err))
			}
		})
	}
	return nil
}

// startBare runs a bare ack loop per queue of the bare row, each on a
// connection of its own, with the prefetch inboxrabbit takes by default.
func (r *rabbitStore) startBare(runCtx context.Context, running *sync.WaitGroup) error {
	for i, q := range r.bare.queues {
		ch, err := r.bareConns[i].Channel()
		if err == nil {
			err = ch.Qos(2*brokerBatch, 0, false)
		}
		if err != nil {
			return err
		}
		deliveries, err := ch.Consume(q, "", false, false, false, false, nil)
		if err != nil {
			return fmt.Errorf("consume %s: %w", q, err)
		}
		running.Go(func() {
			if err := rabbitBareLoop(runCtx, deliveries, r.bare.t); err != nil {
				r.bare.t.fail(fmt.Errorf("bare ack loop of %s: %w", q, err))
			}
		})
	}
	return nil
}

// rabbitBareLoop is what a consumer without an inbox does, batched the way
// inboxrabbit batches: take a delivery and those already waiting behind
// it, up to brokerBatch, and acknowledge each, until ctx is done.
func rabbitBareLoop(ctx context.Context, deliveries <-chan amqp.Delivery, t *tracker) error {
	var ds []amqp.Delivery
	for {
		ds = ds[:0]
		select {
		case <-ctx.Done():
			return nil
		case d, ok := <-deliveries:
			if !ok {
				return errors.New("the channel closed")
			}
			ds = append(ds, d)
		}
	more:
		for len(ds) < brokerBatch {
			select {
			case d, ok := <-deliveries:
				if !ok {
					break more
				}
				ds = append(ds, d)
			default:
				break more
			}
		}
		for _, d := range ds {
			id, _ := d.Headers[inboxrabbit.HeaderEventID].(string)
			t.done(id)
		}
		for _, d := range ds {
			if err := d.Ack(false); err != nil && ctx.Err() == nil {
				return err
			}
		}
	}
}

// rabbitInboxBatch publishes the row's batch to the worker's queue and
// waits until the inboxrabbit consumer has committed it.
func rabbitInboxBatch(ctx context.Context, b *bench, w *worker) error {
	return b.rabbit.roundTrip(ctx, b, w, &b.rabbit.inbox)
}

// rabbitBareAck publishes the row's batch to the worker's queue and waits
// until the bare loop has taken it.
func rabbitBareAck(ctx context.Context, b *bench, w *worker) error {
	return b.rabbit.roundTrip(ctx, b, w, &b.rabbit.bare)
}

// roundTrip publishes a batch of persistent messages to the worker's
// queue of lane, each with its id in the event-id header, waits for the
// broker's confirms, and waits until lane's consumer is done with them.
func (r *rabbitStore) roundTrip(ctx context.Context, b *bench, w *worker, lane *rabbitLane) error {
	es := w.next(b, w.batch)
	part := w.index % b.maxW
	ch, queue := r.channels[part], lane.queues[part]
	return lane.t.roundTrip(ctx, es, func(ctx context.Context) error {
		confirms := make([]*amqp.DeferredConfirmation, len(es))
		for i, e := range es {
			c, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, amqp.Publishing{
				Body:         e.msg.Payload,
				DeliveryMode: amqp.Persistent,
				Headers:      amqp.Table{inboxrabbit.HeaderEventID: e.msg.ID},
			})
			if err != nil {
				return err
			}
			confirms[i] = c
		}
		for _, c := range confirms {
			ok, err := c.WaitContext(ctx)
			if err != nil {
				return err
			}
			if !ok {
				return errors.New("the broker refused a message")
			}
		}
		return nil
	})
}
