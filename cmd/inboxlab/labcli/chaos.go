package labcli

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/txinbox/inbox/cmd/inboxlab/internal/chaos"
	"github.com/txinbox/inbox/internal/command"
	"github.com/txinbox/inbox/internal/dbfault"
)

func runChaos(ctx context.Context, e *Env, args []string) error {
	if rest, ok := outboxFlag(args); ok {
		return runChaosOutbox(ctx, e, rest)
	}
	fs := command.NewFlags(e, "chaos", "chaos [--transport kafka|sqs|nats|rabbitmq] [--duration 60s] [--events N] [--failover sync|async] [--json] [flags]\n       inboxlab chaos --outbox [--duration 60s] [--json] [flags] (see inboxlab chaos-outbox --help)")
	fs.Bool("outbox", false, "run the outbox's end-to-end chaos instead: producers, relays and consumers (the flags of chaos-outbox)")
	transport := fs.String("transport", "kafka", "kafka (kfake in process unless --brokers), sqs (goaws in process unless --sqs-endpoint), nats (an embedded JetStream server) or rabbitmq (the local server)")
	brokers := fs.String("brokers", "", "a real Kafka cluster, host:port[,host:port]")
	sqsEndpoint := fs.String("sqs-endpoint", "", "a real SQS endpoint URL")
	databaseURL := fs.String("database-url", "", "the store: postgres://… (default: $DATABASE_URL, then the local test server)")
	duration := command.Duration{Value: chaos.DefaultDuration}
	fs.Var(&duration, "duration", "how long to inject faults; the drain after it is bounded by the same, or by what redelivery needs if longer (default 1m0s)")
	events := fs.Int("events", chaos.DefaultEvents, "distinct events to produce")
	consumers := fs.Int("consumers", chaos.DefaultConsumers, "consumer processes in the group")
	accounts := fs.Int("accounts", chaos.DefaultAccounts, "accounts the events credit")
	dups := fs.Float64("duplicates", chaos.DefaultDuplicates, "fraction of events the producer sends twice")
	seed := fs.Uint64("seed", 0, "seed for the events and the fault schedule (0: random)")
	dbFaults := fs.String("db-faults", "", "database faults injected in turn, while the consumers log in as a role of their own: a comma list of "+
		dbFaultKinds()+", all ("+joinKinds(chaos.DefaultDBFaults)+") or none (default all; skipped with a note unless --database-url is a superuser's)")
	crashPoison := fs.Int("crash-poison", 0, "events that take down any consumer that applies them, to be dead-lettered as crashed_consumer (default 2; -1 for none)")
	pipelined := fs.Bool("pipelined", false, "consumers queue their statements (inboxpgx.PipelineBatchFunc): one round trip per transaction")
	failover := fs.String("failover", "", "run the store on a primary and a streaming replica of its own, sync or async; mid-run cut replication, kill the primary with SIGKILL and promote the replica")
	asJSON := fs.Bool("json", false, "print exactly one JSON object on stdout")
	verbose := fs.Bool("v", false, "log progress to stderr")
	if err := fs.Parse(args, 0); err != nil {
		return err
	}
	// nil takes chaos.Run's default; a list given, even all, is required.
	var faults []dbfault.Kind
	var err error
	if fs.Set("db-faults") {
		if faults, err = parseDBFaults(*dbFaults); err != nil {
			return err
		}
	}
	// The same bounds as chaos.Run's, checked here so that a mistake is a
	// usage error (exit 2) and starts nothing.
	switch {
	case *transport != "kafka" && *transport != "sqs" && *transport != "nats" && *transport != "rabbitmq":
		return command.Usagef("--transport %q: want kafka, sqs, nats or rabbitmq", *transport)
	case *crashPoison > *events/10:
		return command.Usagef("--crash-poison %d: want at most a tenth of --events (%d)", *crashPoison, *events/10)
	case *consumers < 1 || *consumers > 16:
		return command.Usagef("--consumers %d: want 1 to 16", *consumers)
	case *events < 1 || *events > 1_000_000:
		return command.Usagef("--events %d: want 1 to 1,000,000", *events)
	case *accounts < 1:
		return command.Usagef("--accounts %d: want at least 1", *accounts)
	case math.IsNaN(*dups) || *dups < 0 || *dups > 1:
		return command.Usagef("--duplicates %v: want a fraction between 0 and 1", *dups)
	case duration.Value < 5*time.Second || duration.Value > 24*time.Hour:
		return command.Usagef("--duration %v: want 5s to 24h", duration.Value)
	case *failover != "" && *failover != chaos.FailoverSync && *failover != chaos.FailoverAsync:
		return command.Usagef("--failover %q: want sync or async", *failover)
	case *failover != "" && *databaseURL != "":
		return command.Usagef("--failover starts a primary and a replica of its own: it takes no --database-url")
	case *failover != "" && len(faults) > 0:
		return command.Usagef("--failover injects no database faults: it takes no --db-faults")
	}
	url := *databaseURL
	if url == "" && *failover == "" {
		url = e.Getenv("DATABASE_URL")
	}
	res, err := chaos.Run(ctx, chaos.Config{
		Transport: *transport, Brokers: *brokers, SQSEndpoint: *sqsEndpoint, DatabaseURL: url,
		Consumers: *consumers, Events: *events, Accounts: *accounts, Duplicates: *dups,
		Duration: duration.Value, Seed: *seed, Pipelined: *pipelined, Failover: *failover, CrashPoison: *crashPoison, DBFaults: faults, Log: progress(e, *verbose),
		Command: child(e, "chaos-consumer"),
	})
	if err != nil {
		return err
	}
	if err := output(e, *asJSON, res, printChaos); err != nil {
		return err
	}
	if !res.OK {
		return fmt.Errorf("failed: %s; replay it with --seed %d", res.Reason, res.Seed)
	}
	return nil
}

// parseDBFaults parses --db-faults: a comma list of kinds, all (the
// run's default faults, chaos.DefaultDBFaults: not every kind, for the
// revoke-connect kinds need a database whose CONNECT PUBLIC does not hold),
// or none. A mistake is a usage error.
func parseDBFaults(list string) ([]dbfault.Kind, error) {
	switch strings.TrimSpace(list) {
	case "all":
		return slices.Clone(chaos.DefaultDBFaults), nil
	case "none":
		return []dbfault.Kind{}, nil
	}
	var out []dbfault.Kind
	for _, s := range strings.Split(list, ",") {
		k := dbfault.Kind(strings.TrimSpace(s))
		if !slices.Contains(dbfault.Kinds, k) {
			return nil, command.Usagef("--db-faults %q: unknown fault %q: want a comma list of %s, all or none", list, k, dbFaultKinds())
		}
		out = append(out, k)
	}
	return out, nil
}

func dbFaultKinds() string { return joinKinds(dbfault.Kinds) }

func joinKinds(kinds []dbfault.Kind) string {
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = string(k)
	}
	return strings.Join(names, ", ")
}

func printChaos(w io.Writer, r *chaos.Result) {
	verdict := "OK: every event applied exactly once, nothing lost"
	if !r.OK {
		verdict = fmt.Sprintf("FAILED: %s\n  replay with --seed %d", r.Reason, r.Seed)
	}
	fmt.Fprintf(w, "%s over %s, %d events, seed %d, %s\n", r.Transport, r.Store, r.Events, r.Seed, r.Elapsed.Round(time.Second))
	fmt.Fprintf(w, "  kills %d (", r.Kills)
	points := make([]string, 0, len(r.KillsAt))
	for p := range r.KillsAt {
		points = append(points, p)
	}
	sort.Strings(points)
	for i, p := range points {
		if i > 0 {
			fmt.Fprint(w, ", ")
		}
		fmt.Fprintf(w, "%s %d", p, r.KillsAt[p])
	}
	fmt.Fprintf(w, "), restarts %d, db kills %d, broker faults %d\n", r.Restarts, r.DBKills, r.BrokerFaults)
	if len(r.DBFaults) > 0 {
		kinds := make([]string, 0, len(r.DBFaults))
		for k := range r.DBFaults {
			kinds = append(kinds, k)
		}
		sort.Strings(kinds)
		fmt.Fprint(w, "  database faults: ")
		for i, k := range kinds {
			if i > 0 {
				fmt.Fprint(w, ", ")
			}
			fmt.Fprintf(w, "%s %d", k, r.DBFaults[k])
		}
		fmt.Fprintf(w, "; healthy events dead-lettered %d\n", r.DeadLetteredHealthy)
	}
	if r.Failovers > 0 {
		fmt.Fprintf(w, "  failovers %d\n", r.Failovers)
	}
	if r.Cause != "" {
		fmt.Fprintf(w, "  cause: %s\n", r.Cause)
	}
	fmt.Fprintf(w, "  duplicates delivered %d, skipped %d\n", r.DuplicatesDelivered, r.DuplicatesSkipped)
	fmt.Fprintf(w, "  double applied %d, lost %d, wrong balances %d, inbox rows %d of %d\n",
		r.DoubleApplied, r.Lost, r.BalancesWrong, r.InboxRows, r.Events-r.CrashPoisonSent)
	if r.CrashPoisonSent > 0 {
		fmt.Fprintf(w, "  crash poison: %d sent, %d consumers taken down, %d dead-lettered as crashed_consumer\n",
			r.CrashPoisonSent, r.PoisonCrashes, r.CrashPoisonDeadLettered)
	}
	for _, p := range r.Problems {
		fmt.Fprintf(w, "  problem: %s\n", p)
	}
	fmt.Fprintln(w, verdict)
}

func runChaosConsumer(ctx context.Context, e *Env, args []string) error {
	return chaos.RunConsumer(ctx, args, e.Stdout, e.Stderr)
}
