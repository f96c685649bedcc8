package labcli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/txinbox/inbox/cmd/inboxlab/internal/bench"
	"github.com/txinbox/inbox/cmd/inboxlab/internal/chaos"
	"github.com/txinbox/inbox/cmd/inboxlab/internal/outboxchaos"
	"github.com/txinbox/inbox/internal/command"
)

// errChaosFailed is the error of a chaos run whose invariants did not
// hold; the report says which.
var errChaosFailed = errors.New("an invariant did not hold")

// outboxFlag reports whether args ask 'inboxlab chaos' for the outbox's run
// (--outbox, or --outbox=true), and returns args without that flag.
func outboxFlag(args []string) ([]string, bool) {
	var rest []string
	on := false
	for i, a := range args {
		if a == "--" {
			rest = append(rest, args[i:]...)
			break
		}
		switch strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-") {
		case "outbox", "outbox=true", "outbox=1":
			on = true
			continue
		case "outbox=false", "outbox=0":
			continue
		}
		rest = append(rest, a)
	}
	return rest, on
}

// runChaosOutbox is 'inboxlab chaos --outbox', also named chaos-outbox.
func runChaosOutbox(ctx context.Context, e *Env, args []string) error {
	fs := command.NewFlags(e, "chaos --outbox", "chaos --outbox [--duration 30s] [--db-faults LIST] [--json] [flags]")
	databaseURL := fs.String("database-url", "", "the Postgres server; defaults to $DATABASE_URL, then the local test server")
	duration := command.Duration{Value: outboxchaos.DefaultDuration}
	fs.Var(&duration, "duration", "how long processes are killed for (default 30s)")
	producers := fs.Int("producers", outboxchaos.DefaultProducers, "producer processes")
	relays := fs.Int("relays", outboxchaos.DefaultRelays, "relay processes")
	consumers := fs.Int("consumers", outboxchaos.DefaultConsumers, "consumer processes")
	keys := fs.Int("keys", outboxchaos.DefaultKeys, "keys the orders are spread over")
	seed := fs.Uint64("seed", outboxchaos.DefaultSeed, "chooses which process each kill hits")
	dbFaults := fs.String("db-faults", "all", "database faults injected in turn, while every process logs in as a role of the run (needs a superuser in --database-url): a comma list of "+
		dbFaultKinds()+", all ("+joinKinds(chaos.DefaultDBFaults)+") or none")
	asJSON := fs.Bool("json", false, "print exactly one JSON object on stdout")
	verbose := fs.Bool("v", false, "log progress to stderr")
	if err := fs.Parse(args, 0); err != nil {
		return err
	}
	faults, err := parseDBFaults(*dbFaults)
	if err != nil {
		return err
	}
	url := *databaseURL
	if url == "" {
		url = e.Getenv("DATABASE_URL")
	}
	if url == "" {
		url = bench.DefaultDatabaseURL
	}
	res, err := outboxchaos.Run(ctx, outboxchaos.Config{
		DatabaseURL: url, Duration: duration.Value, Producers: *producers, Relays: *relays, Consumers: *consumers,
		Keys: *keys, Seed: *seed, DBFaults: faults, Log: progress(e, *verbose),
		Command: child(e, "chaos-outbox-child"),
	})
	if err != nil {
		return err
	}
	if err := output(e, *asJSON, res, printChaosOutbox); err != nil {
		return err
	}
	if !res.OK {
		return errChaosFailed
	}
	return nil
}

// faultCounts lists the faults injected, by kind in order, or says none.
func faultCounts(counts map[string]int) string {
	kinds := make([]string, 0, len(counts))
	for k := range counts {
		kinds = append(kinds, k)
	}
	if len(kinds) == 0 {
		return "none"
	}
	slices.Sort(kinds)
	for i, k := range kinds {
		kinds[i] = fmt.Sprintf("%s %d", k, counts[k])
	}
	return strings.Join(kinds, ", ")
}

func runChaosOutboxChild(ctx context.Context, e *Env, args []string) error {
	return outboxchaos.RunChild(ctx, args, e.Stderr)
}

func printChaosOutbox(w io.Writer, res *outboxchaos.Result) {
	fmt.Fprintf(w, "%d orders committed; %d records on the topic, %d of them republished.\n", res.Orders, res.Records, res.Republished)
	fmt.Fprintf(w, "kills: %d producers, %d relays, %d consumers; %d database sessions terminated.\n", res.ProducerKills, res.RelayKills, res.ConsumerKills, res.DBKills)
	fmt.Fprintf(w, "database faults: %s.\n", faultCounts(res.DBFaults))
	fmt.Fprintf(w, "missing %d, orphans %d, double-applied %d, out of order %d: ", res.Missing, res.Orphans, res.DoubleApplied, res.OutOfOrder)
	if res.OK {
		fmt.Fprintln(w, "every committed order applied exactly once, in order per key.")
	} else {
		fmt.Fprintln(w, "FAILED.")
	}
}
