package demo

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxnats"
	"github.com/txinbox/inbox/inboxrabbit"
)

// doneCheck is how often a NATS or RabbitMQ inbox consumer process checks
// whether every record is done.
const doneCheck = 100 * time.Millisecond

type natsFlags struct{ url, stream, durable string }

// runNATSConsumer runs inboxnats until the durable has nothing left: no
// message undelivered, none delivered and not acknowledged. The adapter
// acknowledges a message only after its commit, so every record is then
// in the store.
func runNATSConsumer(ctx context.Context, f *natsFlags, client *inbox.Client[*sql.Tx], handler inbox.Handler[*sql.Tx], consumer string) error {
	nc, err := nats.Connect(f.url)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	cons, err := js.Consumer(ctx, f.stream, f.durable)
	if err != nil {
		return err
	}
	c, err := inboxnats.New(js, client, handler, &inboxnats.Config{
		Stream:   f.stream,
		Durable:  f.durable,
		Consumer: consumer,
		Key:      inbox.HeaderKey(inboxnats.HeaderEventID),
		Workers:  1,
		Batch:    batchSize,
		// The last batch is short: it waits this long for more.
		FetchWait: 500 * time.Millisecond,
	})
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	ran := make(chan error, 1)
	go func() { ran <- c.Run(runCtx) }()
	tick := time.NewTicker(doneCheck)
	defer tick.Stop()
	for {
		select {
		case err := <-ran:
			if err == nil {
				err = ctx.Err()
			}
			return err
		case <-tick.C:
		}
		info, err := cons.Info(ctx)
		if err != nil {
			continue // asked again at the next tick
		}
		if info.NumPending == 0 && info.NumAckPending == 0 {
			stop()
			return <-ran
		}
	}
}

type rabbitFlags struct{ url, queue string }

// runRabbitConsumer runs inboxrabbit until every record is acknowledged.
// The broker counts only the messages ready in a queue, not those
// delivered and unacknowledged, so the consumer runs until the last record
// went through a committed transaction, or it has been idle a while, and
// stops, which closes its channel and puts back what it had not
// acknowledged; it is done if the queue is then empty, and runs again
// otherwise.
func runRabbitConsumer(ctx context.Context, f *rabbitFlags, client *inbox.Client[*sql.Tx], handler inbox.Handler[*sql.Tx], consumer string, w *watch) error {
	c, err := inboxrabbit.New(inboxrabbit.DialURL(f.url, amqp.Config{}), client, handler, &inboxrabbit.Config{
		Queue:    f.queue,
		Consumer: consumer,
		Key:      inbox.HeaderKey(inboxrabbit.HeaderEventID),
		Workers:  1,
		Batch:    batchSize,
	})
	if err != nil {
		return err
	}
	conn, err := amqp.DialConfig(f.url, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	for range 50 {
		if err := runUntilQuiet(ctx, c, w); err != nil {
			return err
		}
		q, err := ch.QueueDeclarePassive(f.queue, false, false, false, false, nil)
		if err != nil {
			return fmt.Errorf("inspect queue %s: %w", f.queue, err)
		}
		if q.Messages == 0 {
			return nil
		}
	}
	return errors.New("the queue still held messages after 50 runs")
}

// runUntilQuiet runs c until the last record went through a committed
// transaction, or c has been idle for a second, or ctx is done.
func runUntilQuiet(ctx context.Context, c *inboxrabbit.Consumer[*sql.Tx], w *watch) error {
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	sawLast := w.arm()
	ran := make(chan error, 1)
	go func() { ran <- c.Run(runCtx) }()
	tick := time.NewTicker(doneCheck)
	defer tick.Stop()
	for {
		select {
		case err := <-ran:
			if err == nil {
				err = ctx.Err()
			}
			return err
		case <-sawLast:
		case <-tick.C:
			if !w.idle(time.Second) {
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
