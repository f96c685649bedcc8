package demo

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/cmd/inboxlab/internal/broker"
	"github.com/txinbox/inbox/inboxkafka"
	"github.com/txinbox/inbox/inboxnats"
	"github.com/txinbox/inbox/inboxrabbit"
	"github.com/txinbox/inbox/inboxtransport"
)

// The inbox consumer processes, one per adapter: each runs its adapter
// over the real store until every record is done, and knows that the way
// its broker can tell.

// doneCheck is how often a NATS or RabbitMQ inbox consumer process checks
// whether every record is done.
const doneCheck = 100 * time.Millisecond

// runKafkaConsumer runs inboxkafka until the last record is done and its
// offset committed.
func runKafkaConsumer(ctx context.Context, where *broker.Address, client *inbox.Client[*sql.Tx], handler inbox.Handler[*sql.Tx], consumer string, records int64) error {
	cl, err := where.InboxKafkaClient(timings)
	if err != nil {
		return err
	}
	defer cl.CloseAllowingRebalance()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var last atomic.Bool
	c, err := inboxkafka.New(cl, client, handler, &inboxkafka.Config{
		Consumer: consumer, Key: broker.EventIDKey,
		Settings: inboxtransport.Settings{MaxBatch: batchSize, OnResult: func(r inboxkafka.Result) {
			// The last record is done: stop, which commits its offset.
			if r.Message.Source.Offset == records-1 && r.Err == nil && last.CompareAndSwap(false, true) {
				stop()
			}
		}},
	})
	if err != nil {
		return err
	}
	return c.Run(runCtx)
}

// runNATSConsumer runs inboxnats until the durable has nothing left: no
// message undelivered, none delivered and not acknowledged. The adapter
// acknowledges a message only after its commit, so every record is then
// in the store.
func runNATSConsumer(ctx context.Context, where *broker.Address, client *inbox.Client[*sql.Tx], handler inbox.Handler[*sql.Tx], consumer string) error {
	nc, js, err := broker.ConnectNATS(where.NATSURL)
	if err != nil {
		return err
	}
	defer nc.Close()
	cons, err := js.Consumer(ctx, where.Stream, where.Durable)
	if err != nil {
		return err
	}
	// The last batch is short: a fetch waits FetchWait for more.
	c, err := inboxnats.New(js, client, handler, &inboxnats.Config{
		Stream: where.Stream, Durable: where.Durable, Consumer: consumer, Key: broker.EventIDKey,
		FetchWait: 500 * time.Millisecond, Settings: inboxtransport.Settings{Workers: 1, MaxBatch: batchSize},
	})
	if err != nil {
		return err
	}
	return runUntil(ctx, c.Run, nil, func() bool {
		info, err := cons.Info(ctx)
		// An error is asked again at the next check.
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	})
}

// runRabbitConsumer runs inboxrabbit until every record is acknowledged.
// The broker counts only the messages ready in a queue, not those
// delivered and unacknowledged, so the consumer runs until the last record
// went through a committed transaction, or it has been idle a while, and
// stops, which closes its channel and puts back what it had not
// acknowledged; it is done if the queue is then empty, and runs again
// otherwise.
func runRabbitConsumer(ctx context.Context, where *broker.Address, client *inbox.Client[*sql.Tx], handler inbox.Handler[*sql.Tx], consumer string, w *watch) error {
	conn, err := broker.RabbitDial(where.AMQPURL)(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	for range 50 {
		// A consumer runs once: each run is a consumer of its own.
		c, err := inboxrabbit.New(broker.RabbitDial(where.AMQPURL), client, handler, &inboxrabbit.Config{
			Queue: where.Queue, Consumer: consumer, Key: broker.EventIDKey,
			Settings: inboxtransport.Settings{Workers: 1, MaxBatch: batchSize},
		})
		if err != nil {
			return err
		}
		sawLast := w.arm()
		if err := runUntil(ctx, c.Run, sawLast, func() bool { return w.idle(time.Second) }); err != nil {
			return err
		}
		q, err := ch.QueueDeclarePassive(where.Queue, true, false, false, false, nil)
		if err != nil {
			return fmt.Errorf("inspect queue %s: %w", where.Queue, err)
		}
		if q.Messages == 0 {
			return nil
		}
	}
	return errors.New("the queue still held messages after 50 runs")
}

// runUntil runs run until it returns, or until wake is closed or done
// reports true at a check, and then stops it. A run that returns by
// itself fails with ctx's error if it has none.
func runUntil(ctx context.Context, run func(context.Context) error, wake <-chan struct{}, done func() bool) error {
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	ran := make(chan error, 1)
	go func() { ran <- run(runCtx) }()
	tick := time.NewTicker(doneCheck)
	defer tick.Stop()
	for {
		select {
		case err := <-ran:
			if err == nil {
				err = ctx.Err()
			}
			return err
		case <-wake:
		case <-tick.C:
			if !done() {
				continue
			}
		}
		stop()
		if err := <-ran; err != nil {
			return err
		}
		return ctx.Err()
	}
}
