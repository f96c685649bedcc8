package labcli

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txinbox/inbox/cmd/inboxlab/internal/demo"
	"github.com/txinbox/inbox/internal/command"
)

func runDemo(ctx context.Context, e *Env, args []string) error {
	fs := command.NewFlags(e, "demo", "demo [--transport kafka|nats|rabbitmq] [--seed N] [--events N] [--json] [--database-url URL] [--brokers HOST:PORT | --nats-url URL | --amqp-url URL]")
	transport := fs.String("transport", demo.TransportKafka, "the broker: kafka, nats (JetStream) or rabbitmq")
	seed := fs.Uint64("seed", demo.DefaultSeed, "the random seed of the events and the crash points: the same seed gives the same run")
	events := fs.Int("events", demo.DefaultEvents, "distinct events to produce (at least 20)")
	databaseURL := fs.String("database-url", "", "run on this Postgres (postgres://…) instead of an embedded SQLite file")
	brokers := fs.String("brokers", "", "run on this Kafka cluster (host:port[,host:port]) instead of an in-process one")
	natsURL := fs.String("nats-url", "", "with --transport nats: run on this NATS server with JetStream (nats://host:port) instead of an in-process one")
	amqpURL := fs.String("amqp-url", "", "with --transport rabbitmq: run on this RabbitMQ (amqp://user:password@host:port/vhost) instead of "+demo.DefaultAMQPURL)
	producer := fs.Bool("producer", true, "tell the producer's side too: the outbox's relay that dies after the broker confirmed, against a producer that mints a new id when it retries (--producer=false leaves it out)")
	asJSON := fs.Bool("json", false, "print exactly one JSON object on stdout")
	verbose := fs.Bool("v", false, "log progress to stderr")
	if err := fs.Parse(args, 0); err != nil {
		return err
	}
	if *events < 20 || *events > 10_000 {
		return command.Usagef("--events %d: want 20 to 10,000", *events)
	}
	if u := *databaseURL; u != "" && !strings.HasPrefix(u, "postgres://") && !strings.HasPrefix(u, "postgresql://") {
		return command.Usagef("--database-url %q: want postgres://… (or nothing, for an embedded SQLite file)", u)
	}
	if !slices.Contains(demo.Transports, *transport) {
		return command.Usagef("--transport %q: want kafka, nats or rabbitmq", *transport)
	}
	for _, f := range []struct {
		name, value, transport string
	}{{"--brokers", *brokers, demo.TransportKafka}, {"--nats-url", *natsURL, demo.TransportNATS}, {"--amqp-url", *amqpURL, demo.TransportRabbitMQ}} {
		if f.value != "" && *transport != f.transport {
			return command.Usagef("%s is for --transport %s, not %s", f.name, f.transport, *transport)
		}
	}
	if *natsURL != "" {
		if u, err := url.Parse(*natsURL); err != nil || u.Host == "" {
			return command.Usagef("--nats-url %q: want nats://host:port", *natsURL)
		}
	}
	if *amqpURL != "" {
		if _, err := amqp.ParseURI(*amqpURL); err != nil {
			return command.Usagef("--amqp-url: %v", err)
		}
	}
	if *brokers != "" {
		for _, b := range strings.Split(*brokers, ",") {
			if _, _, err := net.SplitHostPort(b); err != nil {
				return command.Usagef("--brokers %q: want host:port[,host:port]", *brokers)
			}
		}
	}
	res, err := demo.Run(ctx, demo.Config{
		Seed: *seed, Events: *events, DatabaseURL: *databaseURL, Log: progress(e, *verbose),
		Transport: *transport, Brokers: *brokers, NATSURL: *natsURL, AMQPURL: *amqpURL,
		Producer: *producer,
		Command:  child(e, "demo-consumer"),
	})
	if err != nil {
		return err
	}
	return output(e, *asJSON, res, printDemo)
}

// why says what each strategy got wrong.
var why = map[string]string{
	"none":                             "every redelivery applied again",
	"offset-key":                       "the republished event had a new offset",
	"payload-hash":                     "two real top-ups had the same body",
	"separate-store":                   "the skip was not in the commit",
	"ack-before-commit":                "offsets committed before the work",
	"inbox":                            "event id claimed in the same transaction",
	demo.StrategyWatermillDeduplicator: "keys in memory, recorded before the handler: a restart forgets, a failed handler's redelivery is acked",
}

// whyOn says what a strategy got wrong where a broker tells it otherwise
// than Kafka.
var whyOn = map[string]map[string]string{
	demo.TransportNATS: {
		"offset-key":        "the republished event had a new stream sequence",
		"ack-before-commit": "acked before the work",
	},
	demo.TransportRabbitMQ: {
		"offset-key":        "delivery tags start again on every channel",
		"ack-before-commit": "acked before the work",
	},
}

func printDemo(w io.Writer, r *demo.Result) {
	fmt.Fprintf(w, "The handler that ran twice: %d OrderPlaced events on %s, %s store.\n", r.Events, r.Transport, r.Store)
	if r.Transport == demo.TransportKafka {
		fmt.Fprintf(w, "Billing and inventory each crash after the effect, after the commit, and in a rebalance mid-batch\n")
	} else {
		fmt.Fprintf(w, "Billing and inventory each crash after the effect, after the commit and before the ack, and mid-batch\n")
	}
	fmt.Fprintf(w, "(%d crashes in all); one event is republished, and two real events have identical bodies.\n\n", r.Crashes)
	fmt.Fprintf(w, "%-22s %6s %15s %5s %16s %10s %10s\n", "strategy", "events", "double-applied", "lost", "wrongly-skipped", "balance", "expected")
	for _, s := range r.Strategies {
		mark := "✗"
		if s.BalanceOK && s.DoubleApplied+s.Lost+s.WronglySkipped == 0 {
			mark = "✓"
		}
		fmt.Fprintf(w, "%-22s %6d %15d %5d %16d %10s %10s  %s\n", s.Name, r.Events, s.DoubleApplied, s.Lost, s.WronglySkipped,
			dollars(s.Cents), dollars(s.WantCents), mark)
	}
	fmt.Fprintln(w)
	for _, s := range r.Strategies {
		reason := why[s.Name]
		if r, ok := whyOn[r.Transport][s.Name]; ok {
			reason = r
		}
		fmt.Fprintf(w, "  %-23s %s\n", s.Name+":", reason)
	}
	if r.Producer != nil {
		printProducer(w, r.Producer, r.Transport)
	}
}

// whyProducer says what each producer strategy did.
var whyProducer = map[string]string{
	"outbox":          "the republished events kept their ids: the inbox skipped them",
	"new-id-on-retry": "the retry minted a new id: the inbox could not know",
}

// whyProducerOn says what a producer strategy did where a broker tells it
// otherwise.
var whyProducerOn = map[string]map[string]string{
	demo.TransportNATS: {
		"outbox": "the republished events kept their ids: the stream dropped them (Nats-Msg-Id), the inbox would have skipped them",
	},
}

// printProducer prints the producer's side of the story.
func printProducer(w io.Writer, p *demo.ProducerResult, transport string) {
	fmt.Fprintf(w, "\nThe producer's side: %d orders, each with a PaymentCaptured event. A relay dies after the broker\n", p.Orders)
	fmt.Fprintf(w, "confirmed and before it marked its rows (%d crash, %d events published again); a producer without an\n", p.RelayCrashes, p.Republished)
	fmt.Fprintf(w, "outbox loses %d answers from the broker and sends again with a new id. One inbox consumer charges them.\n\n", p.LostAcks)
	fmt.Fprintf(w, "%-19s %6s %7s %7s %14s %5s %10s %10s\n", "producer", "orders", "records", "skipped", "double-charged", "lost", "charged", "expected")
	for _, s := range p.Strategies {
		mark := "✗"
		if s.BalanceOK && s.DoubleCharged+s.Lost == 0 {
			mark = "✓"
		}
		fmt.Fprintf(w, "%-19s %6d %7d %7d %14d %5d %10s %10s  %s\n", s.Name, p.Orders, s.Records, s.Skipped, s.DoubleCharged, s.Lost, dollars(s.Cents), dollars(s.WantCents), mark)
	}
	fmt.Fprintln(w)
	for _, s := range p.Strategies {
		reason := whyProducer[s.Name]
		if r, ok := whyProducerOn[transport][s.Name]; ok {
			reason = r
		}
		fmt.Fprintf(w, "  %-18s %s\n", s.Name+":", reason)
	}
}

func dollars(cents int64) string { return fmt.Sprintf("$%d.%02d", cents/100, cents%100) }

func runDemoConsumer(ctx context.Context, e *Env, args []string) error {
	return demo.RunConsumer(ctx, args, e.Stderr)
}
