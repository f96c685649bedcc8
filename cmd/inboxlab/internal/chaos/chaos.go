// Package chaos is the crash-safety proof behind 'inboxlab chaos'. It starts
// consumer subprocesses that share one consumer group, produces events to
// them (some twice, on purpose), kills the consumers with SIGKILL at the
// fault points compiled into the real code path and at random times,
// restarts them, terminates their database connections, injects database
// faults (a revoked grant, a read-only database) under a role of their
// own, and injects broker errors where the transport allows. When the
// producer is done and the consumers have drained, it checks that every
// event was applied exactly once, that no event was lost, that every
// balance equals its expected sum, that the inbox holds exactly the
// distinct events, and that no event was dead-lettered: every one is
// healthy.
package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os/exec"
	"strings"
	"time"

	"github.com/txinbox/inbox/internal/command"
	"github.com/txinbox/inbox/internal/dbfault"
	"github.com/txinbox/inbox/internal/fault"
	"github.com/txinbox/inbox/internal/pgcluster"
	"github.com/txinbox/inbox/internal/uuid"
)

// Defaults of the Config fields.
const (
	DefaultConsumers   = 3
	DefaultEvents      = 3000
	DefaultAccounts    = 50
	DefaultDuplicates  = 0.05
	DefaultDuration    = 60 * time.Second
	DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	// DefaultConsumerName is the inbox consumer that every process runs as.
	DefaultConsumerName = "chaos-billing"
	// DefaultCrashPoison is how many crash-poison events a run sends by
	// default.
	DefaultCrashPoison = 2
)

// Config configures a run.
type Config struct {
	// Transport is "kafka" (kfake in process by default), "sqs" (goaws in
	// process by default), "nats" (a server embedded in the coordinator) or
	// "rabbitmq" (the machine's server, or INBOX_CHAOS_AMQP_URL's).
	Transport string
	// Brokers names a real Kafka cluster instead of kfake.
	Brokers string
	// SQSEndpoint names a real SQS (or compatible) endpoint instead of
	// goaws; the queue is created there.
	SQSEndpoint string
	// DatabaseURL is the store: postgres://… or sqlite:PATH. Defaults to
	// DefaultDatabaseURL.
	DatabaseURL string
	// Consumers is the number of consumer processes. Defaults to
	// DefaultConsumers.
	Consumers int
	// Events is the number of distinct events. Defaults to DefaultEvents.
	Events int
	// Accounts is the number of accounts the events credit. Defaults to
	// DefaultAccounts.
	Accounts int
	// Duplicates is the fraction of events the producer sends twice.
	// Defaults to DefaultDuplicates.
	Duplicates float64
	// Duration is how long faults are injected: the events are produced
	// over its first four fifths, and the consumers drain under fire for the
	// rest. The drain without faults that follows is bounded by it too, or
	// by what the transport needs to deliver again the messages that killed
	// consumers held, if that is longer (see drainTimeout). Defaults to
	// DefaultDuration.
	Duration time.Duration
	// Seed makes the event set and the fault schedule repeatable. Zero
	// picks one.
	Seed uint64
	// Command returns the command that runs one consumer with args. The CLI
	// runs its own binary with the hidden chaos-consumer command; tests
	// run their test binary.
	Command func(args []string) *exec.Cmd
	// Log receives progress lines. Defaults to io.Discard.
	Log io.Writer
	// Pipelined makes the consumers' handler an inboxpgx.PipelineBatchFunc,
	// so that batches and messages go to the store as whole transactions in
	// one round trip, instead of a HandlerFunc that runs its statements on
	// the transaction. It does not combine with ControlNoSkip.
	Pipelined bool
	// DBFaults are the database faults injected during the run, one at a
	// time and in turn (see package internal/dbfault), while the consumers
	// log in as a role of their own that the faults act on; it needs a
	// superuser in DatabaseURL. An empty, non-nil list injects none.
	// Defaults to DefaultDBFaults.
	DBFaults []dbfault.Kind
	// dbFaultsByDefault records that DBFaults took its default: then a
	// database user that cannot create the consumers' role skips them,
	// with a note in the log, rather than fail the run.
	dbFaultsByDefault bool
	// CrashPoison is how many events take down any consumer that applies
	// them, half by exiting in the handler, half by a panic on a goroutine
	// the handler started. The run must end with exactly those events
	// dead-lettered as inbox.ReasonCrashedConsumer, and every other event
	// applied once: every adapter bounds them with the takeover ledger
	// (inboxtransport.Settings's MaxCrashes). Defaults to
	// DefaultCrashPoison; negative sends none.
	CrashPoison int
	// Failover, FailoverSync or FailoverAsync, runs the store on a primary
	// and a streaming replica of the run's own (package pgcluster) instead
	// of DatabaseURL, reached through a URL that names both with
	// target_session_attrs=read-write. Mid-run it cuts the replication
	// link, kills the primary with SIGKILL a few seconds later and promotes
	// the replica; the consumers find it by themselves. With synchronous
	// replication nothing acknowledged may be lost; with asynchronous
	// replication the commits of the primary alone are, and the run fails
	// naming the cause. It injects no database faults. Defaults to "",
	// no failover.
	Failover string
	// ControlNoSkip breaks the consumers on purpose: their store reports
	// every claim as new. It is the negative control that shows the check
	// catches double applications; a run with it must not be OK.
	ControlNoSkip bool
}

// Result is the outcome of a run. Its JSON form is the contract of
// 'inboxlab chaos --json'.
type Result struct {
	Transport           string `json:"transport"`
	Store               string `json:"store"`
	Events              int    `json:"events"`
	Kills               int    `json:"kills"`
	Restarts            int    `json:"restarts"`
	DBKills             int    `json:"db_kills"`
	DuplicatesDelivered int    `json:"duplicates_delivered"`
	DuplicatesSkipped   int    `json:"duplicates_skipped"`
	DoubleApplied       int    `json:"double_applied"`
	Lost                int    `json:"lost"`
	// DBFaults counts the database faults injected, by kind.
	DBFaults map[string]int `json:"db_faults"`
	// DeadLetteredHealthy counts the dead letters of events that were not
	// crash poison: every other event of a run is healthy, so any is a
	// misjudged failure. The crashed_consumer dead letters of crash-poison
	// events are intended, and counted in CrashPoisonDeadLettered.
	DeadLetteredHealthy int  `json:"dead_lettered_healthy"`
	OK                  bool `json:"ok"`
	// Seed replays the run's events and fault schedule (Config.Seed).
	Seed uint64 `json:"seed"`
	// Reason says why a run is not OK, in one line; empty when it is.
	Reason string `json:"reason,omitempty"`
	// CrashPoisonSent is how many crash-poison events were sent
	// (Config.CrashPoison), and CrashPoisonDeadLettered how many of them
	// ended dead-lettered as crashed_consumer: the two must be equal.
	CrashPoisonSent         int `json:"crash_poison_sent"`
	CrashPoisonDeadLettered int `json:"crash_poison_dead_lettered"`
	// Failovers counts the promotions of a replica (Config.Failover).
	Failovers int `json:"failovers"`
	// Cause names why acknowledged events are missing after a failover,
	// when they are: asynchronous replication.
	Cause string `json:"cause,omitempty"`

	// Details, not part of the JSON contract.
	KillsAt map[string]int `json:"-"`
	// PoisonCrashes counts the consumers that crash-poison events took down.
	PoisonCrashes int           `json:"-"`
	BrokerFaults  int           `json:"-"`
	BalancesWrong int           `json:"-"`
	InboxRows     int           `json:"-"`
	Problems      []string      `json:"-"`
	Elapsed       time.Duration `json:"-"`
}

// event is one produced event.
type event struct {
	ID      string
	Account int
	Amount  int64
	Twice   bool
	// Crash, when set, makes any consumer that applies the event go down:
	// crashInHandler or crashInGoroutine.
	Crash string
}

// How a crash-poison event takes its consumer down.
const (
	crashInHandler   = "handler"
	crashInGoroutine = "goroutine"
)

func (c *Config) withDefaults() Config {
	out := *c
	if out.Transport == "" {
		out.Transport = "kafka"
	}
	if out.DatabaseURL == "" {
		out.DatabaseURL = DefaultDatabaseURL
	}
	if out.Consumers == 0 {
		out.Consumers = DefaultConsumers
	}
	if out.Events == 0 {
		out.Events = DefaultEvents
	}
	if out.Accounts == 0 {
		out.Accounts = DefaultAccounts
	}
	if out.Duplicates == 0 {
		out.Duplicates = DefaultDuplicates
	}
	if out.Duration == 0 {
		out.Duration = DefaultDuration
	}
	if out.Seed == 0 {
		out.Seed = rand.Uint64()
	}
	if out.Log == nil {
		out.Log = io.Discard
	}
	if out.DBFaults == nil && out.Failover != "" {
		out.DBFaults = []dbfault.Kind{}
	}
	if out.DBFaults == nil {
		out.DBFaults = DefaultDBFaults
		out.dbFaultsByDefault = true
	}
	switch {
	case out.CrashPoison == 0 && !out.ControlNoSkip:
		out.CrashPoison = DefaultCrashPoison
	case out.CrashPoison < 0:
		out.CrashPoison = 0
	}
	return out
}

func (c *Config) validate() error {
	switch {
	case c.Transport != "kafka" && c.Transport != "sqs" && c.Transport != "nats" && c.Transport != "rabbitmq":
		return fmt.Errorf("transport %q: want kafka, sqs, nats or rabbitmq", c.Transport)
	case c.Consumers < 1 || c.Consumers > 16:
		return fmt.Errorf("consumers %d: want 1 to 16", c.Consumers)
	case c.Events < 1 || c.Events > 1_000_000:
		return fmt.Errorf("events %d: want 1 to 1,000,000", c.Events)
	case c.Accounts < 1:
		return fmt.Errorf("accounts %d: want at least 1", c.Accounts)
	case c.Duplicates < 0 || c.Duplicates > 1:
		return fmt.Errorf("duplicates %v: want a fraction between 0 and 1", c.Duplicates)
	case c.Duration < 5*time.Second || c.Duration > 24*time.Hour:
		return fmt.Errorf("duration %v: want 5s to 24h", c.Duration)
	case c.Command == nil:
		return errors.New("Config.Command is nil")
	case c.Failover != "" && c.Failover != FailoverSync && c.Failover != FailoverAsync:
		return fmt.Errorf("failover %q: want %s or %s", c.Failover, FailoverSync, FailoverAsync)
	case c.Failover != "" && len(c.DBFaults) > 0:
		return errors.New("database faults do not combine with a failover")
	case c.CrashPoison > c.Events/10:
		return fmt.Errorf("crash poison %d: want at most a tenth of the events (%d)", c.CrashPoison, c.Events/10)
	}
	for _, k := range c.DBFaults {
		if _, err := dbfault.ParseKinds(string(k)); err != nil {
			return err
		}
	}
	return nil
}

// makeEvents draws the events: random accounts and amounts, a fraction
// marked to be produced twice. Ids are time-ordered UUIDs, as a producer
// would mint them.
func makeEvents(cfg *Config, r *rand.Rand) []event {
	events := make([]event, cfg.Events)
	t := time.Now()
	for i := range events {
		events[i] = event{
			ID:      uuid.V7(t.Add(time.Duration(i) * time.Millisecond)),
			Account: 1 + r.IntN(cfg.Accounts),
			Amount:  1 + r.Int64N(1000),
			Twice:   r.Float64() < cfg.Duplicates,
		}
	}
	// The crash-poison events, spread over the run and never sent twice.
	for n, i := 0, 0; n < cfg.CrashPoison; i++ {
		e := &events[r.IntN(len(events))]
		if e.Crash != "" {
			continue
		}
		e.Twice = false
		e.Crash = crashInHandler
		if n%2 == 1 {
			e.Crash = crashInGoroutine
		}
		n++
	}
	return events
}

// faultSpec is the INBOX_FAULTS value the consumers run with: each named
// fault point kills the process with a small probability per hit.
func faultSpec(perHit float64) string {
	s := ""
	for i, p := range fault.Points {
		if i > 0 {
			s += ","
		}
		s += fmt.Sprintf("%s=%g", p, perHit)
	}
	return s
}

// Run runs the chaos test and returns its result. An error means the run
// could not be carried out; a run that found a violation returns a Result
// with OK false.
func Run(ctx context.Context, config Config) (*Result, error) {
	cfg := config.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	start := time.Now()
	r := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))
	c := &chaosRun{cfg: &cfg}
	var err error
	if c.cluster, err = startCluster(ctx, &cfg); err != nil {
		return nil, err
	}
	if c.cluster != nil {
		defer c.cluster.Close()
	}
	if c.st, c.pg, err = openChaosStore(ctx, &cfg); err != nil {
		return nil, err
	}
	defer func() { cleaned(ctx, c.st.close()) }()
	if c.tr, err = newTransport(ctx, &cfg); err != nil {
		return nil, err
	}
	defer func() { cleaned(ctx, c.tr.close()) }()

	c.events = makeEvents(&cfg, r)
	res := &Result{Transport: cfg.Transport, Store: c.st.kind(), Events: len(c.events), Seed: cfg.Seed, KillsAt: map[string]int{},
		DBFaults: map[string]int{}, CrashPoisonSent: cfg.CrashPoison}
	fmt.Fprintf(cfg.Log, "chaos: %s over %s, %d events to %d accounts, %d consumers, seed %d\n",
		cfg.Transport, c.st.kind(), len(c.events), cfg.Accounts, cfg.Consumers, cfg.Seed)

	c.sup = newSupervisor(&cfg, consumerArgs(&cfg, c.st, c.tr), res)
	defer func() {
		// An interrupted run proves nothing: its consumers are killed at
		// once rather than given stopGrace to finish.
		grace := c.sup.stopGrace
		if ctx.Err() != nil {
			grace = 0
		}
		if n := c.sup.stopAllWithin(grace); n > 0 {
			command.Cleaned(ctx, "stopped %s", command.Count(n, "consumer", "consumers"))
		}
	}()
	if err := c.sup.startAll(ctx); err != nil {
		return nil, err
	}
	drainFor := drainTimeout(&cfg)
	if err := c.underFire(ctx, r, drainFor); err != nil {
		return nil, err
	}
	c.drain(ctx, drainFor, res)
	if err := c.st.check(ctx, c.events, res); err != nil {
		return nil, err
	}
	res.Elapsed = time.Since(start)
	if cfg.Failover != "" {
		if res.Failovers == 0 {
			res.Problems = append(res.Problems, "the run ended before the failover")
		}
		res.Cause = failoverCause(cfg.Failover, res.Lost)
	}
	res.Reason = res.failure()
	res.OK = res.Reason == ""
	return res, nil
}

// chaosRun is what a run has set up: the store, the transport, the
// consumers' supervisor, the events, and the cluster of a failover run.
type chaosRun struct {
	cfg     *Config
	cluster *pgcluster.Cluster // nil unless cfg.Failover
	st      store
	pg      *pgStore // st, when it is Postgres
	tr      *transport
	sup     *supervisor
	events  []event
}

// startCluster starts the primary and replica of a failover run, and
// points cfg at the primary; it returns nil when cfg asks for no failover.
func startCluster(ctx context.Context, cfg *Config) (*pgcluster.Cluster, error) {
	if cfg.Failover == "" {
		return nil, nil
	}
	fmt.Fprintf(cfg.Log, "chaos: starting a primary and a %sous replica\n", map[bool]string{true: "synchron", false: "asynchron"}[cfg.Failover == FailoverSync])
	cluster, err := pgcluster.Start(ctx, &pgcluster.Config{Replica: true, Synchronous: cfg.Failover == FailoverSync})
	if err != nil {
		return nil, err
	}
	cfg.DatabaseURL = cluster.URL()
	fmt.Fprintf(cfg.Log, "chaos: the store is %s\n", cfg.DatabaseURL)
	return cluster, nil
}

// openChaosStore opens and sets up the store, and returns it with its
// Postgres self, if it is one. It drops the database faults that cfg asked
// for by default when the store cannot inject them.
func openChaosStore(ctx context.Context, cfg *Config) (_ store, _ *pgStore, err error) {
	st, err := openStore(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			cleaned(ctx, st.close())
		}
	}()
	if err := st.setup(ctx, cfg.Accounts); err != nil {
		return nil, nil, err
	}
	pg, _ := st.(*pgStore)
	if len(cfg.DBFaults) > 0 {
		if pg == nil {
			return nil, nil, fmt.Errorf("database faults need Postgres, not %s", st.kind())
		}
		switch err := pg.consumerRole(ctx); {
		case errors.Is(err, errNotSuperuser) && cfg.dbFaultsByDefault:
			fmt.Fprintf(cfg.Log, "chaos: no database faults: %v\n", err)
			cfg.DBFaults = nil
		case err != nil:
			return nil, nil, err
		}
	}
	return st, pg, nil
}

// underFire produces the events while the consumers are killed, the
// database faulted and the primary failed over, for the run's duration.
func (c *chaosRun) underFire(ctx context.Context, r *rand.Rand, drainFor time.Duration) error {
	cfg, sup := c.cfg, c.sup
	// The producer is done by four fifths of the duration unless sends
	// are very slow; it is given up on after a drain's time more.
	produceCtx, stopProducing := context.WithTimeout(ctx, cfg.Duration+drainFor)
	defer stopProducing()
	produced := make(chan error, 1)
	produceSeed := r.Uint64()
	go func() { produced <- produce(produceCtx, c.tr, c.events, cfg.Duration*4/5, produceSeed) }()

	chaosCtx, endChaos := context.WithTimeout(ctx, cfg.Duration)
	defer endChaos()
	// The database faults go on beside the kills, for the same time.
	dbFaultsDone := make(chan struct{})
	dbFaultSeed := r.Uint64()
	go func() {
		defer close(dbFaultsDone)
		injectDBFaults(chaosCtx, cfg, c.pg, rand.New(rand.NewPCG(dbFaultSeed, dbFaultSeed^0x9e3779b97f4a7c15)), sup.count)
	}()
	failedOver := make(chan struct{})
	go func() {
		defer close(failedOver)
		if c.cluster != nil {
			failover(chaosCtx, cfg, c.cluster, sup)
		}
	}()
	// Faults go on for the whole duration, including after the last event
	// is produced: the consumers then drain under fire. Only a failed
	// producer ends the phase early.
	var produceErr error
	producing := true
	sup.chaos(chaosCtx, r, c.st, c.tr, func() bool {
		if producing {
			select {
			case produceErr = <-produced:
				producing = false
			default:
			}
		}
		return produceErr != nil
	})
	if producing {
		produceErr = <-produced
	}
	endChaos()
	<-dbFaultsDone // every fault restored
	<-failedOver   // the replica promoted, or the failover given up on
	if produceErr != nil {
		return fmt.Errorf("produce: %w", produceErr)
	}
	return ctx.Err()
}

// drain lets the consumers finish without faults, until every event is
// applied or dead-lettered or nothing more is for drainFor, then stops
// them. A drain that stalls is one of res's problems.
func (c *chaosRun) drain(ctx context.Context, drainFor time.Duration, res *Result) {
	cfg, st, events := c.cfg, c.st, c.events
	fmt.Fprintf(cfg.Log, "chaos: draining without faults, until nothing more is applied for %v\n", drainFor)
	c.tr.calm()
	progress := time.Now()
	drained := func(ctx context.Context) (bool, int) {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		n, err := st.applied(ctx)
		var dead map[string]string
		if err == nil {
			dead, err = st.deadLetters(ctx)
		}
		switch {
		case err != nil:
			fmt.Fprintf(cfg.Log, "chaos: count the events applied: %v\n", err)
		case time.Since(progress) >= 2*time.Second:
			progress = time.Now()
			fmt.Fprintf(cfg.Log, "chaos: %d of %d events applied, %d of %d crash-poison events dead-lettered\n",
				n, len(events)-cfg.CrashPoison, len(dead), cfg.CrashPoison)
		}
		return err == nil && n >= len(events)-cfg.CrashPoison && len(dead) >= cfg.CrashPoison, n + len(dead)
	}
	if err := c.sup.drain(ctx, drainFor, drained); err != nil {
		res.Problems = append(res.Problems, err.Error())
	}
	c.sup.stopAll()
}

// cleaned records what a cleanup said, for the line of an interrupted run.
func cleaned(ctx context.Context, said []string) {
	for _, s := range said {
		command.Cleaned(ctx, "%s", s)
	}
}

// consumerArgs are the arguments every consumer process runs with, after
// its --slot.
func consumerArgs(cfg *Config, st store, tr *transport) []string {
	args := append([]string{"--consumer", DefaultConsumerName}, st.consumerArgs()...)
	args = append(args, tr.consumerArgs()...)
	if cfg.ControlNoSkip {
		args = append(args, "--control-no-skip")
	}
	if cfg.Pipelined {
		args = append(args, "--pipelined")
	}
	return args
}

// drainRedeliveries is how many of the transport's longest redeliveries
// the drain without faults allows at least: a message that a consumer
// killed at the end of the chaos held comes back after one, and may be
// handed back once or twice more (a claim that waited behind a concurrent
// delivery of the same event, a rebalance) before it is applied.
const drainRedeliveries = 3

// drainTimeout is the stall window of the drain without faults: the run's
// duration, or drainRedeliveries times what bounds redelivery on the
// transport, if that is longer. It is how long the proof waits without
// headway before it counts an event as lost, so it must let every message
// that a killed consumer held come back.
func drainTimeout(cfg *Config) time.Duration {
	return max(cfg.Duration, drainRedeliveries*redelivery(cfg.Transport))
}

// failure says, in one line, why res is not OK; it is empty when res is.
func (res *Result) failure() string {
	var parts []string
	const shown = 3
	for i, p := range res.Problems {
		if i == shown {
			parts = append(parts, fmt.Sprintf("%d more problems", len(res.Problems)-shown))
			break
		}
		parts = append(parts, p)
	}
	if res.DoubleApplied > 0 {
		parts = append(parts, fmt.Sprintf("%d double applications", res.DoubleApplied))
	}
	if res.Lost > 0 {
		parts = append(parts, fmt.Sprintf("%d events lost", res.Lost))
	}
	if res.Cause != "" {
		parts = append(parts, res.Cause)
	}
	if res.BalancesWrong > 0 {
		parts = append(parts, fmt.Sprintf("%d balances wrong", res.BalancesWrong))
	}
	if want := res.Events - res.CrashPoisonSent; res.InboxRows != want {
		parts = append(parts, fmt.Sprintf("the inbox holds %d rows for %d events", res.InboxRows, want))
	}
	if res.DeadLetteredHealthy > 0 {
		parts = append(parts, fmt.Sprintf("%d healthy events dead-lettered", res.DeadLetteredHealthy))
	}
	if res.CrashPoisonDeadLettered != res.CrashPoisonSent {
		parts = append(parts, fmt.Sprintf("%d of %d crash-poison events dead-lettered as crashed_consumer", res.CrashPoisonDeadLettered, res.CrashPoisonSent))
	}
	return strings.Join(parts, "; ")
}
