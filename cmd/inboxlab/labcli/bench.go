package labcli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/txinbox/inbox/cmd/inboxlab/internal/bench"
	"github.com/txinbox/inbox/internal/command"
)

// runBench runs the benchmarks: the inbox against no dedup, a hand-rolled
// check-then-insert and a Redis SETNX, and end to end on Kafka, NATS and
// RabbitMQ beside a bare ack loop, side by side in one run. With --json
// stdout gets exactly one JSON object; progress goes to stderr.
func runBench(ctx context.Context, e *Env, args []string) error {
	fs := command.NewFlags(e, "bench", "bench [--quick] [--json] [flags]")
	quick := fs.Bool("quick", false, "a short run, about three minutes here (fewer and shorter rounds, a smaller purge and id comparison)")
	asJSON := fs.Bool("json", false, "print one JSON object on stdout instead of Markdown tables")
	dbURL := fs.String("database-url", "", "the Postgres server; a random schema is created in it and dropped at the end (default $DATABASE_URL, then "+bench.DefaultDatabaseURL+")")
	redisAddr := fs.String("redis-addr", bench.DefaultRedisAddr, "the Redis of the redis-setnx row; empty leaves that row out")
	amqpURL := fs.String("amqp-url", bench.DefaultAMQPURL, "the RabbitMQ of the rabbitmq-… rows; empty leaves them out, as does a server that does not answer (the report says so)")
	natsURL := fs.String("nats-url", "", "the NATS server, with JetStream, of the nats-… rows (a stream named after the run's schema is created and deleted); empty runs one in this process")
	var rabbitBatchWait command.Duration
	fs.Var(&rabbitBatchWait, "rabbitmq-batch-wait", "the rabbitmq-… rows' inboxrabbit Config.BatchWait, and their bare loop's: how long a receive that has a delivery waits for more to fill its batch (default 0, the adapter's: take what is ready)")
	rowsFlag := fs.String("rows", "", "comma-separated rows to run (default all): "+strings.Join(bench.Names(), ", "))
	workersFlag := fs.String("workers", "", "comma-separated worker counts (default 1,8)")
	var warmup, duration, purgeBaseline, idDuration command.Duration
	fs.Var(&warmup, "warmup", "unmeasured run of each row before the rounds (default 100ms quick, 1s full)")
	fs.Var(&duration, "duration", "how long each row runs in each round (default 250ms quick, 1s full)")
	fs.Var(&purgeBaseline, "purge-baseline", "claims measured without a purge, before and after it (default 2s quick, 5s full)")
	fs.Var(&idDuration, "id-duration", "how long each id kind runs in each round (default 1s quick, 4s full)")
	rounds := fs.Int("rounds", 0, "rounds of every row, each in a new order (default 7 quick, 15 full)")
	purgeRows := fs.Int("purge-rows", -1, "expired rows the purge under load deletes; 0 leaves it out (default 250000 quick, 1000000 full)")
	purgeBatch := fs.Int("purge-batch", 0, "rows per DELETE of the purge (default the client's, 10000)")
	idRows := fs.Int("id-rows", -1, "rows in the inbox before UUIDv4 and UUIDv7 are compared; 0 leaves it out (default 100000 quick, 1000000 full)")
	idRounds := fs.Int("id-rounds", 0, "rounds of each id kind (default 2 quick, 3 full)")
	relayBacklogs := fs.String("relay-backlogs", "", "comma-separated backlogs of the relay-… drain rows: the ordered rows drain each, the unordered ones the largest; 0 leaves them out (default 10000,100000)")
	relayRounds := fs.Int("relay-rounds", 0, "rounds of every drain row (default 5 quick, 7 full)")
	seed := fs.Uint64("seed", 1, "seed of the message streams and of the order of the rounds")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run (this process: the bench, the adapters and any broker embedded in it) to this file, for go tool pprof")
	memProfile := fs.String("memprofile", "", "write a profile of the memory this process allocated during the run to this file, for go tool pprof -sample_index=alloc_space")
	if err := fs.Parse(args, 0); err != nil {
		return err
	}
	cfg := bench.Full()
	if *quick {
		cfg = bench.Quick()
	}
	cfg.DatabaseURL = *dbURL
	if cfg.DatabaseURL == "" {
		cfg.DatabaseURL = e.Getenv("DATABASE_URL")
	}
	if cfg.DatabaseURL == "" {
		cfg.DatabaseURL = bench.DefaultDatabaseURL
	}
	cfg.RedisAddr = *redisAddr
	cfg.AMQPURL = *amqpURL
	cfg.NATSURL = *natsURL
	cfg.RabbitMQBatchWait = rabbitBatchWait.Value
	if *rowsFlag != "" {
		cfg.Rows = splitList(*rowsFlag)
	}
	if *workersFlag != "" {
		ws, err := parseInts(*workersFlag)
		if err != nil {
			return command.Usagef("--workers: %v", err)
		}
		cfg.Workers = ws
	}
	for _, d := range []struct {
		f   *command.Duration
		dst *time.Duration
	}{{&warmup, &cfg.Warmup}, {&duration, &cfg.Duration}, {&purgeBaseline, &cfg.PurgeBaseline}, {&idDuration, &cfg.IDDuration}} {
		if d.f.Given {
			*d.dst = d.f.Value
		}
	}
	if *rounds != 0 {
		cfg.Rounds = *rounds
	}
	if *purgeRows >= 0 {
		cfg.PurgeRows = *purgeRows
	}
	cfg.PurgeBatchSize = *purgeBatch
	if *idRows >= 0 {
		cfg.IDRows = *idRows
	}
	if *idRounds != 0 {
		cfg.IDRounds = *idRounds
	}
	if *relayBacklogs != "" {
		ns, err := parseInts(*relayBacklogs)
		if err != nil {
			return command.Usagef("--relay-backlogs: %v", err)
		}
		if len(ns) == 1 && ns[0] == 0 {
			ns = nil
		}
		cfg.RelayBacklogs = ns
	}
	if *relayRounds != 0 {
		cfg.RelayRounds = *relayRounds
	}
	cfg.Seed = *seed
	cfg.Log = e.Stderr
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if *memProfile != "" {
		runtime.MemProfileRate = 64 << 10
		defer writeHeapProfile(e, *memProfile)
	}
	rep, err := bench.Run(ctx, cfg)
	if err != nil {
		var ce *bench.ConfigError
		if errors.As(err, &ce) {
			return command.Usagef("%v", err)
		}
		return err
	}
	if *asJSON {
		return json.NewEncoder(e.Stdout).Encode(rep)
	}
	fmt.Fprintf(e.Stdout, "# inboxlab bench\n\n")
	return rep.WriteMarkdown(e.Stdout)
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, p := range splitList(s) {
		n, err := strconv.Atoi(p)
		if err != nil {
			return nil, fmt.Errorf("%q is not a number", p)
		}
		out = append(out, n)
	}
	return out, nil
}

// writeHeapProfile writes the allocations profile to path; a failure is
// reported on stderr, the run's report stands.
func writeHeapProfile(e *Env, path string) {
	f, err := os.Create(path)
	if err == nil {
		err = pprof.Lookup("allocs").WriteTo(f, 0)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintf(e.Stderr, "inboxlab bench: --memprofile: %v\n", err)
	}
}
