package bench

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/cmd/inboxlab/internal/broker"
	"github.com/txinbox/inbox/inboxrabbit"
	"github.com/txinbox/inbox/inboxtransport"
)

// DefaultAMQPURL is the machine's RabbitMQ, for the rabbitmq-… rows.
const DefaultAMQPURL = broker.DefaultAMQPURL

// rabbitStore is the RabbitMQ side of the rabbitmq-inbox-batch-100 and
// rabbitmq-bare-ack rows, on the server at Config.AMQPURL: per worker a
// queue for each row, as a stream partitioned by account key is consumed,
// and a producer channel in confirm mode. The queues are durable, named
// after the run's random schema (<schema>.inbox.<worker>,
// <schema>.bare.<worker>), and deleted at the end of the run, or by the
// server after ten idle minutes if the run dies. Each consumer has a
// connection of its own.
type rabbitStore struct {
	r *broker.Rabbit
	// producers are one per worker.
	producers []*broker.RabbitProducer
	inbox     lane
	bare      lane
}

var rabbitResource = &resource{
	name:       "rabbitmq",
	background: true,
	open: func(ctx context.Context, b *bench) (func(), error) {
		// Named after the run's schema, so that they can be found.
		s := &rabbitStore{inbox: newLane(b, b.schema+".inbox."), bare: newLane(b, b.schema+".bare.")}
		return openWith(func(c *cleanup) error { return s.open(ctx, b, c) })
	},
}

// open connects, declares the queues and starts the consumers. A server
// that cannot be reached is unavailable: the rows are left out.
func (s *rabbitStore) open(ctx context.Context, b *bench, c *cleanup) error {
	var err error
	if s.r, err = broker.OpenRabbit(b.cfg.AMQPURL, false); err != nil {
		return &unavailableError{err}
	}
	c.add(func() { cleanedQueues(ctx, "RabbitMQ", b.schema+".*", s.r.Cleanup()) })
	for _, q := range append(append([]string(nil), s.inbox.names...), s.bare.names...) {
		if err := s.r.DeclareQueue(q); err != nil {
			return err
		}
	}
	for range b.maxW {
		p, err := s.r.NewProducer()
		if err != nil {
			return err
		}
		s.producers = append(s.producers, p)
	}
	// An inboxrabbit consumer per queue of the inbox row, at batch 100,
	// over the Postgres inbox with the batch rows' handler, and a bare ack
	// loop per queue of the bare row, batched the way inboxrabbit batches,
	// with the prefetch it takes by default.
	if err := startLanes(ctx, b, c, &s.inbox, &s.bare, func(client *inbox.Client[pgx.Tx], q string) (runner, error) {
		return inboxrabbit.New[pgx.Tx](broker.RabbitDial(b.cfg.AMQPURL), client, b.pg.batchHandler, &inboxrabbit.Config{
			Queue: q, Consumer: "bench-rabbitmq", Key: broker.EventIDKey, BatchWait: b.cfg.RabbitMQBatchWait,
			Settings: inboxtransport.Settings{Workers: 1, MaxBatch: brokerBatch, ShutdownTimeout: 5 * time.Second},
		})
	}, func(q string) (broker.Poller, error) {
		return s.r.Subscribe(q, &broker.PollConfig{Batch: brokerBatch, Prefetch: 2 * brokerBatch, BatchWait: b.cfg.RabbitMQBatchWait})
	}); err != nil {
		return err
	}
	b.rabbit = s
	return nil
}

// rabbitInboxBatch publishes the row's batch to the worker's queue and
// waits until the inboxrabbit consumer has committed it.
func rabbitInboxBatch(ctx context.Context, b *bench, w *worker) error {
	return laneTrip(ctx, b, w, b.rabbit, &b.rabbit.inbox)
}

// rabbitBareAck publishes the row's batch to the worker's queue and waits
// until the bare loop has taken it.
func rabbitBareAck(ctx context.Context, b *bench, w *worker) error {
	return laneTrip(ctx, b, w, b.rabbit, &b.rabbit.bare)
}

// send publishes msgs, persistent, to queue on the worker's channel, and
// waits for the broker's confirms.
func (s *rabbitStore) send(ctx context.Context, part int, queue string, msgs []broker.Message) error {
	return s.producers[part].Send(ctx, "", queue, msgs...)
}
