package inboxcli

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxkafka"
	"github.com/txinbox/inbox/outbox"
)

// maxOnceRounds bounds 'inbox relay --once'.
const maxOnceRounds = 1_000_000

func runRelay(ctx context.Context, e *Env, args []string) error {
	fs := newFlags(e, "relay", "relay --brokers HOST:PORT[,HOST:PORT…] [--once] [flags]")
	var sf storeFlags
	outboxFlags(fs, &sf)
	brokers := fs.String("brokers", "", "the Kafka brokers to publish to, comma-separated (the sink is Kafka)")
	batch := fs.Int("batch", outbox.DefaultBatchSize, "the most events one claim takes")
	lease := fs.Duration("lease", outbox.DefaultLease, "how long a claim holds its events before another relay may take them")
	poll := fs.Duration("poll", outbox.DefaultPollInterval, "how long to wait when there is nothing to publish")
	maxRejections := fs.Int("max-rejections", outbox.DefaultMaxRejections, "broker rejections before an event is parked")
	keep := fs.Bool("keep-published", false, "keep published events, marked, instead of deleting them")
	once := fs.Bool("once", false, "publish what is ready, then exit")
	verbose := fs.Bool("v", false, "log every batch")
	if err := parseFlags(fs, args, 0); err != nil {
		return err
	}
	if *brokers == "" {
		return usagef("--brokers: want the Kafka brokers to publish to, such as localhost:9092")
	}
	if *batch <= 0 || *maxRejections <= 0 {
		return usagef("--batch and --max-rejections must be positive")
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(*brokers, ",")...))
	if err != nil {
		return usagef("--brokers: %v", err)
	}
	defer cl.Close()
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(e.Stderr, &slog.HandlerOptions{Level: level}))
	return withOutbox(ctx, e, &sf, func(a inboxdriver.OutboxAdmin) error {
		r, err := outbox.NewRelay(a, inboxkafka.NewOutboxSink(cl), &outbox.RelayConfig{
			BatchSize: *batch, Lease: *lease, PollInterval: *poll, MaxRejections: *maxRejections,
			KeepPublished: *keep, Logger: logger,
		})
		if err != nil {
			return usagef("%v", err)
		}
		if !*once {
			fmt.Fprintf(e.Stderr, "relaying the outbox to Kafka at %s; stop with Ctrl-C\n", *brokers)
			return r.Run(ctx)
		}
		var total outbox.Result
		start := time.Now()
		for range maxOnceRounds {
			res, err := r.RelayOnce(ctx)
			total.Claimed += res.Claimed
			total.Published += res.Published
			total.Rejected += res.Rejected
			total.Parked += res.Parked
			total.Unavailable += res.Unavailable
			if err != nil {
				return err
			}
			if res.Unavailable > 0 {
				return fmt.Errorf("the broker is unavailable after %d events were published: %w", total.Published, res.UnavailableErr)
			}
			if res.Claimed == 0 || ctx.Err() != nil {
				break
			}
		}
		fmt.Fprintf(e.Stdout, "published %d events in %s; %d rejected, %d parked\n", total.Published,
			time.Since(start).Round(time.Millisecond), total.Rejected, total.Parked)
		return nil
	})
}
