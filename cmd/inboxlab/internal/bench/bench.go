// Package bench runs `inboxlab bench`: the inbox against what users would pick
// instead, side by side in one run, on one machine, with one side effect:
//
//	UPDATE accounts SET balance = balance + $1 WHERE id = $2
//
// over Config.Accounts accounts.
//
// # Rows
//
// Each row of the results is one way of applying that side effect to a
// stream of messages (see rows.go): no dedup at all, a hand-rolled
// check-then-insert, a Redis SETNX beside the SQL write, and the inbox one
// message per transaction, in batches, and on the skip path. Each row runs
// at each worker count of Config.Workers.
//
// # Fairness
//
// Every row shares one pool of max(Config.Workers) connections, the same
// accounts, the same message stream (UUIDv7 ids, random accounts and
// amounts) and the same warm-up. Messages are keyed by account, as a broker
// partitioned by account key delivers them: worker i of n only sees the
// accounts ≡ i mod n, so no two workers wait on each other's row locks. The
// rows run in rounds, each round in a new random order, so that the drift of
// a shared, noisy machine falls on every row alike. A row's msgs/s is the
// median of its rounds; its latencies are percentiles over every operation
// of every round.
//
// # WAL
//
// WAL bytes per message come from the pg_current_wal_lsn() delta over each
// round of a row. The LSN is cluster-wide, so other sessions on the server
// can only add to it: the figure reported is the least over the rounds.
//
// # Isolation
//
// Everything lives in a random schema that is dropped when the run ends,
// and in Redis keys under a random prefix that are deleted then.
package bench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/internal/command"
	"github.com/txinbox/inbox/outbox"
)

// DefaultDatabaseURL is the local test server.
const DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// DefaultRedisAddr is the machine's Redis, for the redis-setnx row.
const DefaultRedisAddr = "127.0.0.1:6379"

// DefaultAccounts is the number of accounts the side effect updates.
const DefaultAccounts = 10_000

// DefaultWorkers are the worker counts every row runs at.
var DefaultWorkers = []int{1, 8}

// Config configures a run. Start from Quick or Full and change fields.
type Config struct {
	// DatabaseURL is the Postgres server to measure. A random schema is
	// created in it and dropped at the end.
	DatabaseURL string
	// RedisAddr is the Redis server of the redis-setnx row. Empty leaves
	// that row out.
	RedisAddr string
	// AMQPURL is the RabbitMQ server of the rabbitmq-… rows. Empty leaves
	// those rows out; a server that cannot be reached leaves them out too,
	// and the report says why.
	AMQPURL string
	// NATSURL is the NATS server, with JetStream, of the nats-… rows.
	// Empty runs one in this process, so that the rows need no set-up; a
	// server that cannot be reached leaves the rows out, and the report
	// says why.
	NATSURL string
	// RabbitMQBatchWait is the inboxrabbit Config.BatchWait of the
	// rabbitmq-… rows' consumers, and the same wait of their bare loop.
	// Zero, the adapter's default, takes what is ready.
	RabbitMQBatchWait time.Duration
	// Rows names the rows to run, all if empty.
	Rows []string
	// Workers are the worker counts each row runs at.
	Workers []int
	// Accounts is the number of accounts.
	Accounts int
	// Warmup is how long each row runs at each worker count, unmeasured,
	// before the first round.
	Warmup time.Duration
	// Duration is how long each row runs at each worker count in each round.
	Duration time.Duration
	// Rounds is how many times every row runs, each round in a new order.
	Rounds int
	// PurgeRows is how many expired rows the purge under load deletes. Zero
	// leaves the purge measurement out.
	PurgeRows int
	// PurgeBaseline is how long claims are measured without a purge, before
	// and again after it.
	PurgeBaseline time.Duration
	// PurgeBatchSize is the purge's batch size; zero takes the client's
	// default, inbox.DefaultPurgeBatchSize.
	PurgeBatchSize int
	// IDRows is how many rows the inbox holds before UUIDv4 and UUIDv7 ids
	// are compared. Zero leaves the comparison out.
	IDRows int
	// IDDuration is how long each id kind runs in each of IDRounds rounds.
	IDDuration time.Duration
	// IDRounds is how many times each id kind runs.
	IDRounds int
	// OutboxEvents is how many events each drain of the outbox's relay
	// section publishes. Zero leaves the section out, as does a run whose
	// rows include no outbox row.
	OutboxEvents int
	// RelayBacklogs are the backlogs of the drain rows (relaydrain.go): the
	// ordered rows drain each, the unordered ones the largest. Empty
	// leaves the drain rows out.
	RelayBacklogs []int
	// RelayRounds is how many times each drain row runs at each of its
	// backlogs, each round in a new order.
	RelayRounds int
	// Seed seeds the message streams and the order of the rounds.
	Seed uint64
	// Log receives progress lines. Nil is silent.
	Log io.Writer
}

// Quick is the configuration of `inboxlab bench --quick`: about three minutes on the 2-core machine,
// with a quarter of the purge and a tenth of the inbox of the id
// comparison.
func Quick() Config {
	return Config{
		DatabaseURL:   DefaultDatabaseURL,
		RedisAddr:     DefaultRedisAddr,
		AMQPURL:       DefaultAMQPURL,
		Workers:       DefaultWorkers,
		Accounts:      DefaultAccounts,
		Warmup:        100 * time.Millisecond,
		Duration:      250 * time.Millisecond,
		Rounds:        7,
		PurgeRows:     250_000,
		PurgeBaseline: 2 * time.Second,
		IDRows:        100_000,
		IDDuration:    time.Second,
		IDRounds:      2,
		OutboxEvents:  20_000,
		RelayBacklogs: []int{10_000, 100_000},
		RelayRounds:   5,
		Seed:          1,
	}
}

// Full is the configuration of a full run, for docs/BENCHMARKS.md.
func Full() Config {
	c := Quick()
	c.Warmup = time.Second
	c.Duration = time.Second
	c.Rounds = 15
	c.PurgeRows = 1_000_000
	c.PurgeBaseline = 5 * time.Second
	c.IDRows = 1_000_000
	c.IDDuration = 4 * time.Second
	c.IDRounds = 3
	c.OutboxEvents = 100_000
	c.RelayRounds = 7
	return c
}

func (c *Config) validate() error {
	switch {
	case c.Accounts < 1:
		return configErrorf("Config.Accounts must be positive, got %d", c.Accounts)
	case len(c.Workers) == 0:
		return configErrorf("Config.Workers is empty")
	case c.Duration <= 0:
		return configErrorf("Config.Duration must be positive, got %v", c.Duration)
	case c.Rounds < 1:
		return configErrorf("Config.Rounds must be positive, got %d", c.Rounds)
	case c.Warmup < 0:
		return configErrorf("Config.Warmup must not be negative, got %v", c.Warmup)
	case c.PurgeRows < 0:
		return configErrorf("Config.PurgeRows must not be negative, got %d", c.PurgeRows)
	case c.PurgeBatchSize < 0:
		return configErrorf("Config.PurgeBatchSize must not be negative, got %d", c.PurgeBatchSize)
	case c.PurgeRows > 0 && c.PurgeBaseline <= 0:
		return configErrorf("Config.PurgeBaseline must be positive, got %v", c.PurgeBaseline)
	case c.IDRows < 0:
		return configErrorf("Config.IDRows must not be negative, got %d", c.IDRows)
	case c.OutboxEvents < 0:
		return configErrorf("Config.OutboxEvents must not be negative, got %d", c.OutboxEvents)
	case len(c.RelayBacklogs) > 0 && c.RelayRounds < 1:
		return configErrorf("Config.RelayRounds must be positive, got %d", c.RelayRounds)
	case c.IDRows > 0 && (c.IDDuration <= 0 || c.IDRounds < 1):
		return configErrorf("Config.IDDuration and Config.IDRounds must be positive, got %v and %d", c.IDDuration, c.IDRounds)
	}
	for _, w := range c.Workers {
		if w < 1 || w > 64 {
			return configErrorf("Config.Workers: %d is not between 1 and 64", w)
		}
		if w > c.Accounts {
			return configErrorf("Config.Workers: %d workers need at least as many accounts, got %d", w, c.Accounts)
		}
	}
	if c.AMQPURL != "" {
		if _, err := amqp.ParseURI(c.AMQPURL); err != nil {
			return configErrorf("Config.AMQPURL: %v", err)
		}
	}
	for _, n := range c.RelayBacklogs {
		if n < 1 {
			return configErrorf("Config.RelayBacklogs: %d is not a positive number of events", n)
		}
	}
	for _, name := range c.Rows {
		if findRow(name) == nil && !slices.ContainsFunc(drainRows, func(d *drainRow) bool { return d.name == name }) {
			return configErrorf("Config.Rows: unknown row %q; the rows are %s", name, strings.Join(Names(), ", "))
		}
	}
	return nil
}

// ConfigError is a Config that Run refuses, naming the field.
type ConfigError struct{ msg string }

func (e *ConfigError) Error() string { return "bench: " + e.msg }

func configErrorf(format string, args ...any) error {
	return &ConfigError{msg: fmt.Sprintf(format, args...)}
}

// bench is one run: its connections, its schema and its results so far.
type bench struct {
	cfg     Config
	log     io.Writer
	start   time.Time
	pool    *pgxpool.Pool // the workers' connections
	admin   *pgxpool.Pool // setup, LSNs, the purge
	schema  string
	maxW    int
	workers []*worker
	rows    []*row

	cpu *cpuMeter
	// txs times the broker rows' inbox transactions.
	txs    txClock
	pg     *pgStore
	redis  *redisStore
	sqlite *sqliteStore
	kafka  *kafkaStore
	nats   *natsStore
	rabbit *rabbitStore
	// telemetry holds the clients of the telemetry rows (telemetry.go).
	telemetry *telemetryStore
	// watermillSQL and watermillInbox are the Watermill rows' (watermill.go).
	watermillSQL   *watermillSQL
	watermillInbox *watermillInbox
	// skipped are the rows left out because a resource they need could
	// not be reached.
	skipped []Skipped
	outbox  *outbox.Outbox[pgx.Tx]
	// opened holds the resources opened so far.
	opened map[*resource]bool
	// closers close what was opened, in reverse order, at the end.
	closers []func()
}

// Run runs the benchmark and returns its report.
func Run(ctx context.Context, cfg Config) (rep *Report, err error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	b := &bench{cfg: cfg, log: cfg.Log, start: time.Now(), maxW: slices.Max(cfg.Workers), opened: map[*resource]bool{}}
	if b.log == nil {
		b.log = io.Discard
	}
	b.rows = selectRows(cfg)
	defer b.close()
	if err := b.connect(ctx); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x1b0c5))
	for i := range b.maxW {
		b.workers = append(b.workers, newWorker(cfg.Seed, i))
	}
	if err := b.openAll(ctx); err != nil {
		return nil, err
	}
	rep = &Report{Machine: b.machine(ctx)}
	if rep.Results, err = b.runRows(ctx, rng); err != nil {
		return nil, err
	}
	// The rows run are known once the background resources were opened.
	rep.Settings, rep.Skipped = b.settings(), b.skipped
	if cfg.PurgeRows > 0 {
		if rep.Purge, err = b.runPurge(ctx); err != nil {
			return nil, err
		}
		if rep.Partition, err = b.runPartition(ctx); err != nil {
			return nil, err
		}
	}
	if cfg.IDRows > 0 {
		if rep.IDs, err = b.runIDs(ctx, rng); err != nil {
			return nil, err
		}
	}
	if cfg.OutboxEvents > 0 && b.outboxRows() {
		if rep.Outbox, err = b.runOutbox(ctx); err != nil {
			return nil, err
		}
	}
	if drains := selectDrains(cfg); len(drains) > 0 {
		if rep.Relay, err = b.runRelay(ctx, rng, drains); err != nil {
			return nil, err
		}
	}
	rep.Targets = rep.Ratios()
	rep.Machine.LoadEnd = loadAvg()
	return rep, nil
}

// connect opens the pools and the schema, and drops the schema on close.
func (b *bench) connect(ctx context.Context) error {
	pcfg, err := pgxpool.ParseConfig(b.cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("database URL: %w", err)
	}
	where := fmt.Sprintf("%s:%d/%s", pcfg.ConnConfig.Host, pcfg.ConnConfig.Port, pcfg.ConnConfig.Database)
	// Every row gets the same pool: one connection per worker, all opened
	// up front, so that no row pays for dialling.
	pcfg.MaxConns = int32(b.maxW)
	pcfg.MinConns = int32(b.maxW)
	// The workers' sessions have the client's lock timeout, as inboxpgx
	// recommends: a claim then needs no statements around it to bound its
	// lock wait.
	pcfg.ConnConfig.RuntimeParams["lock_timeout"] = strconv.FormatInt(inbox.DefaultLockTimeout.Milliseconds(), 10)
	b.pool, err = pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return fmt.Errorf("cannot reach the database at %s: %w", where, err)
	}
	b.closers = append(b.closers, b.pool.Close)
	acfg := pcfg.Copy()
	// One admin connection stays open, so that the schema can be dropped
	// at the end even when the server has no connection left to give.
	acfg.MaxConns, acfg.MinConns = 3, 1
	delete(acfg.ConnConfig.RuntimeParams, "lock_timeout")
	b.admin, err = pgxpool.NewWithConfig(ctx, acfg)
	if err != nil {
		return fmt.Errorf("cannot reach the database at %s: %w", where, err)
	}
	b.closers = append(b.closers, b.admin.Close)
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := b.admin.Ping(pctx); err != nil {
		return fmt.Errorf("cannot reach the database at %s: %w", where, err)
	}
	b.cpu = newCPUMeter(ctx, b.pool, b.maxW, pcfg.ConnConfig.Host)
	b.schema = "inbox_bench_" + randomSuffix()
	drop, err := b.createSchema(ctx, b.schema)
	if err != nil {
		return err
	}
	b.logf("schema %s on %s", b.schema, where)
	b.closers = append(b.closers, drop)
	b.pg = &pgStore{}
	return b.pg.setup(ctx, b)
}

// createSchema creates schema with the admin pool, and returns the func
// that drops it, with everything in it, and says so.
func (b *bench) createSchema(ctx context.Context, schema string) (drop func(), err error) {
	if _, err := b.admin.Exec(ctx, `CREATE SCHEMA `+pgx.Identifier{schema}.Sanitize()); err != nil {
		return nil, fmt.Errorf("create schema: %w", err)
	}
	return func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 60*time.Second)
		defer cancel()
		if _, err := b.admin.Exec(dctx, `DROP SCHEMA `+pgx.Identifier{schema}.Sanitize()+` CASCADE`); err != nil {
			b.logf("drop schema %s: %v", schema, err)
			command.Cleaned(ctx, "could not drop schema %s (%s)", schema, command.Message(err))
		} else {
			command.Cleaned(ctx, "dropped schema %s", schema)
		}
	}, nil
}

// openAll opens the resources the rows need, but for the background ones,
// which runRows opens for the rows that need them. A resource that cannot
// be reached (an unavailableError) leaves out the rows that need it, and is
// reported; any other failure fails the run.
func (b *bench) openAll(ctx context.Context) error {
	failed := map[*resource]error{}
	for _, r := range b.rows {
		for _, res := range r.needs {
			if _, ok := failed[res]; ok || res.background {
				continue
			}
			if err := b.open(ctx, res); err != nil {
				if !isUnavailable(err) {
					return err
				}
				failed[res] = err
			}
		}
	}
	b.leaveOut(failed)
	return nil
}

// leaveOut removes from the run the rows that need a resource that failed,
// and reports them.
func (b *bench) leaveOut(failed map[*resource]error) {
	if len(failed) == 0 {
		return
	}
	kept := b.rows[:0:0]
	for _, r := range b.rows {
		var why error
		for _, res := range r.needs {
			if err := failed[res]; err != nil {
				why = err
				break
			}
		}
		if why == nil {
			kept = append(kept, r)
			continue
		}
		b.logf("leaving out row %s: %v", r.name, why)
		b.skipped = append(b.skipped, Skipped{Row: r.name, Reason: why.Error()})
	}
	b.rows = kept
}

// open opens a resource a row needs, once.
func (b *bench) open(ctx context.Context, res *resource) error {
	if b.opened[res] {
		return nil
	}
	b.logf("open %s", res.name)
	closeFn, err := res.open(ctx, b)
	if err != nil {
		if isUnavailable(err) {
			return err
		}
		return fmt.Errorf("%s: %w", res.name, err)
	}
	if closeFn != nil {
		b.closers = append(b.closers, closeFn)
	}
	b.opened[res] = true
	return nil
}

func (b *bench) close() {
	for i := len(b.closers) - 1; i >= 0; i-- {
		b.closers[i]()
	}
	b.closers = nil
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.log, "bench: %5.1fs "+format+"\n", append([]any{time.Since(b.start).Seconds()}, args...)...)
}

// table returns the schema-qualified, quoted name of a table.
func (b *bench) table(name string) string {
	return pgx.Identifier{b.schema, name}.Sanitize()
}

// lsn returns the server's current WAL position in bytes.
func (b *bench) lsn(ctx context.Context) (int64, error) {
	var n int64
	err := b.admin.QueryRow(ctx, `SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("read the WAL position: %w", err)
	}
	return n, nil
}

func (b *bench) settings() Settings {
	names := make([]string, len(b.rows))
	for i, r := range b.rows {
		names[i] = r.name
	}
	return Settings{
		Schema:              b.schema,
		Rows:                names,
		Workers:             b.cfg.Workers,
		Accounts:            b.cfg.Accounts,
		PoolSize:            b.maxW,
		WarmupS:             b.cfg.Warmup.Seconds(),
		DurationS:           b.cfg.Duration.Seconds(),
		Rounds:              b.cfg.Rounds,
		PurgeRows:           b.cfg.PurgeRows,
		IDRows:              b.cfg.IDRows,
		IDDurationS:         b.cfg.IDDuration.Seconds(),
		IDRounds:            b.cfg.IDRounds,
		Seed:                b.cfg.Seed,
		GoMaxProcs:          runtime.GOMAXPROCS(0),
		IDKind:              "uuidv7",
		SideEffectSQL:       "UPDATE accounts SET balance = balance + $1 WHERE id = $2",
		InProcessBrokers:    b.inProcessBrokers(),
		RabbitMQBatchWaitMS: float64(b.cfg.RabbitMQBatchWait) / float64(time.Millisecond),
	}
}

// inProcessBrokers are the brokers that run in this process, whose CPU
// the client CPU of their rows counts: kfake always, NATS unless the run
// was given a server.
func (b *bench) inProcessBrokers() []string {
	out := []string{"kafka"}
	if b.cfg.NATSURL == "" {
		out = append(out, "nats")
	}
	return out
}
