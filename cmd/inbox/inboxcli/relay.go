package inboxcli

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxkafka"
	"github.com/txinbox/inbox/inboxnats"
	"github.com/txinbox/inbox/inboxrabbit"
	"github.com/txinbox/inbox/internal/command"
	"github.com/txinbox/inbox/outbox"
)

// maxOnceRounds bounds 'inbox relay --once'.
const maxOnceRounds = 1_000_000

func runRelay(ctx context.Context, e *Env, args []string) error {
	fs := command.NewFlags(e, "relay", "relay [--sink kafka] --brokers HOST:PORT[,HOST:PORT…] [--once] [flags]\n       inbox relay --sink nats [--nats-url nats://HOST:PORT] | --sink rabbitmq [--amqp-url amqp://…] [--exchange NAME]")
	var sf storeFlags
	outboxFlags(fs, &sf)
	sinkName := fs.String("sink", "kafka", "the broker to publish to: kafka, nats (JetStream) or rabbitmq")
	brokers := fs.String("brokers", "", "with --sink kafka: the Kafka brokers to publish to, comma-separated")
	natsURL := fs.String("nats-url", nats.DefaultURL, "with --sink nats: the NATS server with JetStream; each event goes to the subject named by its topic")
	amqpURL := fs.String("amqp-url", "amqp://guest:guest@127.0.0.1:5672/", "with --sink rabbitmq: the RabbitMQ server")
	exchange := fs.String("exchange", "", "with --sink rabbitmq: the exchange, with each event's topic as the routing key (default: the default exchange, where the topic names the queue)")
	batch := fs.Int("batch", outbox.DefaultBatchSize, "the most events one claim takes")
	lease := fs.Duration("lease", outbox.DefaultLease, "how long a claim holds its events before another relay may take them")
	poll := fs.Duration("poll", outbox.DefaultPollInterval, "how long to wait when there is nothing to publish")
	maxRejections := fs.Int("max-rejections", outbox.DefaultMaxRejections, "broker rejections before an event is parked")
	keep := fs.Bool("keep-published", false, "keep published events, marked, instead of deleting them")
	once := fs.Bool("once", false, "publish what is ready, then exit: 0 when the outbox is left empty")
	connectTimeout := fs.Duration("connect-timeout", defaultConnectTimeout, "with --once and --sink kafka: how long to wait for brokers that do not answer")
	verbose := fs.Bool("v", false, "log every batch")
	if err := fs.Parse(args, 0); err != nil {
		return err
	}
	if *batch <= 0 || *maxRejections <= 0 {
		return command.Usagef("--batch and --max-rejections must be positive")
	}
	if *brokers != "" && *sinkName != "kafka" {
		return command.Usagef("--brokers is for --sink kafka, not %s", *sinkName)
	}
	var sink outbox.Sink
	var where string
	switch *sinkName {
	case "kafka":
		if *brokers == "" {
			return command.Usagef("--brokers: want the Kafka brokers to publish to, such as localhost:9092")
		}
		cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(*brokers, ",")...))
		if err != nil {
			return command.Usagef("--brokers: %v", err)
		}
		defer cl.Close()
		sink, where = inboxkafka.NewOutboxSink(cl), "Kafka at "+*brokers
		if *once {
			// A run that must end says at once that the brokers do not
			// answer, rather than wait out each publish's retries.
			pctx, cancel := context.WithTimeout(ctx, *connectTimeout)
			err := cl.Ping(pctx)
			cancel()
			if err != nil && ctx.Err() == nil {
				return fmt.Errorf("cannot reach %s within %s: %w", where, *connectTimeout, err)
			}
		}
	case "nats":
		nc, err := nats.Connect(*natsURL, nats.MaxReconnects(-1))
		if err != nil {
			return fmt.Errorf("cannot reach NATS at %s: %w", *natsURL, err)
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			return err
		}
		sink, where = inboxnats.NewOutboxSink(js), "NATS JetStream at "+*natsURL
	case "rabbitmq":
		if _, err := amqp.ParseURI(*amqpURL); err != nil {
			return command.Usagef("--amqp-url: %v", err)
		}
		rs := &rabbitSink{url: *amqpURL, cfg: &inboxrabbit.OutboxSinkConfig{Exchange: *exchange}}
		defer rs.close()
		if err := rs.dial(); err != nil {
			return fmt.Errorf("cannot reach RabbitMQ: %w", err)
		}
		sink, where = rs, "RabbitMQ"
	default:
		return command.Usagef("--sink %q: want kafka, nats or rabbitmq", *sinkName)
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(e.Stderr, &slog.HandlerOptions{Level: level}))
	return withOutbox(ctx, e, &sf, func(a inboxdriver.OutboxAdmin) error {
		r, err := outbox.NewRelay(a, sink, &outbox.RelayConfig{
			BatchSize: *batch, Lease: *lease, PollInterval: *poll, MaxRejections: *maxRejections,
			KeepPublished: *keep, Logger: logger,
		})
		if err != nil {
			return command.Usagef("%v", err)
		}
		if !*once {
			fmt.Fprintf(e.Stderr, "relaying the outbox to %s; stop with Ctrl-C\n", where)
			return r.Run(ctx)
		}
		start := time.Now()
		total, err := relayOnce(ctx, r)
		if err != nil {
			return err
		}
		fmt.Fprintf(e.Stdout, "published %s in %s; %d rejected, %d parked\n", command.Count(total.Published, "event", "events"),
			time.Since(start).Round(time.Millisecond), total.Rejected, total.Parked)
		// --once promises that nothing is left to publish: events the
		// broker rejected wait for their backoff. Parked events wait for an
		// operator, not a relay: they are counted, and do not fail it.
		st, err := outboxStats(ctx, a)
		if err != nil {
			return err
		}
		if st.Parked > 0 {
			fmt.Fprintf(e.Stdout, "%s parked, waiting for an operator: see 'inbox outbox list'\n", command.Count(st.Parked, "event is", "events are"))
		}
		if st.Pending > 0 {
			return fmt.Errorf("%s still pending (%d rejected by %s in this run, to be tried again after their backoff): see 'inbox outbox list'",
				command.Count(st.Pending, "event is", "events are"), total.Rejected, where)
		}
		return nil
	})
}

// defaultConnectTimeout bounds how long 'relay --once' waits for Kafka
// brokers that do not answer.
const defaultConnectTimeout = 10 * time.Second

// relayOnce relays until nothing is ready, the broker is unavailable, or
// ctx ends.
func relayOnce(ctx context.Context, r *outbox.Relay) (outbox.Result, error) {
	var total outbox.Result
	for range maxOnceRounds {
		res, err := r.RelayOnce(ctx)
		total.Claimed += res.Claimed
		total.Published += res.Published
		total.Rejected += res.Rejected
		total.Parked += res.Parked
		total.Unavailable += res.Unavailable
		if err != nil {
			return total, err
		}
		if res.Unavailable > 0 {
			return total, fmt.Errorf("the broker is unavailable after %s were published: %w", command.Count(total.Published, "event", "events"), res.UnavailableErr)
		}
		if res.Claimed == 0 || ctx.Err() != nil {
			break
		}
	}
	return total, ctx.Err()
}

// rabbitSink is an inboxrabbit.OutboxSink that dials again, on the next
// publish, when its connection closed: amqp091-go does not reconnect.
type rabbitSink struct {
	url string
	cfg *inboxrabbit.OutboxSinkConfig

	mu   sync.Mutex
	conn *amqp.Connection
	sink *inboxrabbit.OutboxSink
}

// dial opens a connection, a channel and a sink over it.
func (s *rabbitSink) dial() error {
	conn, err := amqp.Dial(s.url)
	if err != nil {
		return err
	}
	ch, err := conn.Channel()
	if err == nil {
		var sink *inboxrabbit.OutboxSink
		if sink, err = inboxrabbit.NewOutboxSink(ch, s.cfg); err == nil {
			s.conn, s.sink = conn, sink
			return nil
		}
	}
	conn.Close()
	return err
}

func (s *rabbitSink) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != nil {
		s.conn.Close()
	}
}

// Publish implements outbox.Sink.
func (s *rabbitSink) Publish(ctx context.Context, recs []outbox.Record) []error {
	s.mu.Lock()
	if s.conn == nil || s.conn.IsClosed() {
		if s.conn != nil {
			s.conn.Close()
			s.conn, s.sink = nil, nil
		}
		if err := s.dial(); err != nil {
			s.mu.Unlock()
			errs := make([]error, len(recs))
			for i := range errs {
				errs[i] = outbox.Unavailable(fmt.Errorf("dial RabbitMQ: %w", err))
			}
			return errs
		}
	}
	sink := s.sink
	s.mu.Unlock()
	return sink.Publish(ctx, recs)
}
