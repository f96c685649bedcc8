package chaos

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/cmd/inboxlab/internal/broker"
	"github.com/txinbox/inbox/inboxkafka"
	"github.com/txinbox/inbox/inboxnats"
	"github.com/txinbox/inbox/inboxrabbit"
	"github.com/txinbox/inbox/inboxsqs"
	"github.com/txinbox/inbox/inboxtransport"
)

// The consumer processes' inbox adapters, one configuration each. Chaos
// makes messages come back often, and fail for reasons that are not
// theirs: the attempts a message gets are many, and its backoff short.

// runTransportConsumer runs the transport's adapter until ctx is done.
func runTransportConsumer(ctx context.Context, f *consumerFlags, client *inbox.Client[pgx.Tx], h inbox.Handler[pgx.Tx]) error {
	w := &f.where
	switch w.Transport {
	case broker.TransportKafka:
		var opts []kgo.Opt
		if debugLog() {
			opts = append(opts, kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelInfo, nil)))
		}
		cl, err := w.InboxKafkaClient(kafkaTimings, opts...)
		if err != nil {
			return err
		}
		defer cl.CloseAllowingRebalance()
		c, err := inboxkafka.New(cl, client, h, &inboxkafka.Config{
			Consumer: f.consumer, Key: broker.EventIDKey,
			Settings: inboxtransport.Settings{
				MaxBatch: 100, RetryBackoff: 10 * time.Millisecond, MaxRetryBackoff: time.Second,
				// Chaos fails messages for reasons that are not theirs.
				MaxDeliveries: 1000, ShutdownTimeout: kafkaShutdownTimeout, Logger: consumerLogger(),
			},
		})
		return runAdapter(ctx, c, err)
	case broker.TransportSQS:
		c, err := inboxsqs.New(broker.SQSClient(w.SQSEndpoint), client, h, &inboxsqs.Config{
			QueueURL: w.QueueURL, Consumer: f.consumer, Key: inbox.JSONKey("event_id"),
			WaitTime: sqsWait, VisibilityTimeout: sqsVisibility,
			Settings: inboxtransport.Settings{
				Workers: 2, MaxDeliveries: 1000, RetryBackoff: sqsRetryBackoff, MaxRetryBackoff: sqsMaxRetryBackoff,
				ShutdownTimeout: 5 * time.Second, Logger: consumerLogger(),
			},
		})
		return runAdapter(ctx, c, err)
	case broker.TransportNATS:
		nc, js, err := broker.ConnectNATS(w.NATSURL)
		if err != nil {
			return err
		}
		defer nc.Close()
		c, err := inboxnats.New(js, client, h, &inboxnats.Config{
			Stream: w.Stream, Durable: w.Durable, Consumer: f.consumer, Key: inbox.JSONKey("event_id"),
			FetchWait: time.Second,
			Settings: inboxtransport.Settings{
				// Chaos makes messages come back often; none of that is the
				// message's fault.
				MaxBatch: 100, MaxDeliveries: 1000, RetryBackoff: retryBackoff, MaxRetryBackoff: maxRetryBackoff,
				ShutdownTimeout: 5 * time.Second, Logger: consumerLogger(),
			},
		})
		return runAdapter(ctx, c, err)
	case broker.TransportRabbitMQ:
		c, err := inboxrabbit.New(broker.RabbitDial(w.AMQPURL), client, h, &inboxrabbit.Config{
			Queue: w.Queue, Consumer: f.consumer, Key: inbox.JSONKey("event_id"),
			ReconnectBackoff: 50 * time.Millisecond, MaxReconnectBackoff: time.Second,
			Settings: inboxtransport.Settings{
				MaxBatch: 100, MaxDeliveries: 1000, RetryBackoff: retryBackoff, MaxRetryBackoff: maxRetryBackoff,
				ShutdownTimeout: 5 * time.Second, Logger: consumerLogger(),
			},
		})
		return runAdapter(ctx, c, err)
	}
	return fmt.Errorf("chaos-consumer: transport %q is not available", w.Transport)
}

// runAdapter runs c until ctx is done, unless making it failed with err.
func runAdapter(ctx context.Context, c interface{ Run(context.Context) error }, err error) error {
	if err != nil {
		return err
	}
	return c.Run(ctx)
}
