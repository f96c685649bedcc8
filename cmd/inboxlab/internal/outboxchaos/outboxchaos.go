// Package outboxchaos is the outbox's chaos run: the whole chain, from the
// business transaction to the consumer's effect, with every process in it
// killed, again and again.
//
// Producers record orders, each with its event enqueued in the same
// transaction under the order's id (ordered mode, keyed). Relays publish
// the outbox to Kafka (kfake, in the coordinator). Consumers apply the
// events through the inbox, one effect row per application. All of them
// are processes of their own: the coordinator kills a random one with
// SIGKILL about once a second, and each also kills itself at named fault
// points, with a small probability per hit: a producer after it enqueued and
// before it committed, a relay after Kafka confirmed and before it deleted
// its rows, a consumer at the inbox's points. Killed processes are started
// again.
//
// Meanwhile the database fails under them: every child logs in as a role
// created for the run, whose sessions the coordinator terminates about every
// third second (db kills), and on which the database faults of 'inbox
// chaos' act, one at a time and in turn (package dbchaos): INSERT revoked,
// in turn on the outbox (the producers' enqueue) and on the inbox (the
// consumers' claims), and the database read-only for every role at once.
//
// When the time is up every fault is restored, the producers stop, the
// relays and consumers are restarted without faults, and the run waits
// until every order's event was applied. It then checks that every
// committed order has exactly one effect, that no effect lacks its order,
// and that each key's effects were applied in the order of their orders'
// commits.
package outboxchaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/inbox/cmd/inboxlab/internal/broker"
	"github.com/txinbox/inbox/cmd/inboxlab/internal/child"
	"github.com/txinbox/inbox/cmd/inboxlab/internal/dbchaos"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxmigrate"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/internal/command"
	"github.com/txinbox/inbox/internal/dbfault"
	"github.com/txinbox/inbox/internal/testdb"
)

// Defaults of the Config fields.
const (
	DefaultDuration  = 30 * time.Second
	DefaultProducers = 2
	DefaultRelays    = 2
	DefaultConsumers = 2
	DefaultKeys      = 32
	DefaultSeed      = 1
)

// partitions is the topic's partition count.
const partitions = 4

// The fault probabilities per hit of each role's points, while the run is
// in its chaos phase.
var roleFaults = map[string]string{
	roleProducer: "outbox-after-enqueue=0.005",
	roleRelay:    "relay-after-publish=0.05",
	roleConsumer: "after-claim=0.002,after-effect-before-commit=0.002,after-commit-before-ack=0.002,mid-batch=0.002",
}

// Config configures a run.
type Config struct {
	// DatabaseURL is the Postgres server. The run works in a schema of its
	// own, dropped at the end.
	DatabaseURL string
	// Duration is how long the processes are killed for. Defaults to
	// DefaultDuration.
	Duration time.Duration
	// Producers, Relays and Consumers are how many processes of each role
	// run at once. Default to DefaultProducers, DefaultRelays and
	// DefaultConsumers.
	Producers, Relays, Consumers int
	// Keys is how many keys the orders are spread over. Defaults to
	// DefaultKeys.
	Keys int
	// Seed chooses which process each kill hits. Defaults to DefaultSeed.
	Seed uint64
	// DBFaults are the database faults injected during the chaos phase,
	// one at a time and in turn, on the role every child logs in as; they
	// need a superuser in DatabaseURL. An empty, non-nil list injects none
	// (and terminates no session). Defaults to dbchaos.DefaultKinds, the
	// faults of 'inboxlab chaos'.
	DBFaults []dbfault.Kind
	// Command returns the command that runs RunChild with args: the CLI
	// runs its own binary with a hidden command.
	Command func(args []string) *exec.Cmd
	// Log receives progress lines. Defaults to io.Discard.
	Log io.Writer
}

// Result is a run's outcome. Its JSON form is the contract of
// 'inboxlab chaos-outbox --json'.
type Result struct {
	// OK reports that every invariant held: Missing, Orphans,
	// DoubleApplied and OutOfOrder are all zero, and, unless the run was
	// configured without database faults, at least one was injected.
	OK        bool    `json:"ok"`
	DurationS float64 `json:"duration_s"`
	// Orders counts the committed orders; Records the records on the
	// topic, of which Republished were a second (or later) copy of an
	// event.
	Orders      int64 `json:"orders"`
	Records     int64 `json:"records"`
	Republished int64 `json:"republished"`
	// The kills of each role: by the coordinator and at fault points.
	ProducerKills int `json:"producer_kills"`
	RelayKills    int `json:"relay_kills"`
	ConsumerKills int `json:"consumer_kills"`
	// Missing counts committed orders with no effect; Orphans effects with
	// no committed order; DoubleApplied the extra effects of orders
	// applied more than once; OutOfOrder the effects applied after a later
	// event of the same key.
	Missing       int64 `json:"missing"`
	Orphans       int64 `json:"orphans"`
	DoubleApplied int64 `json:"double_applied"`
	OutOfOrder    int64 `json:"out_of_order"`
	// DBFaults counts the database faults injected, by kind; DBKills the
	// children's database sessions the coordinator terminated.
	DBFaults map[string]int `json:"db_faults"`
	DBKills  int            `json:"db_kills"`
}

func (c *Config) withDefaults() Config {
	out := *c
	if out.Duration == 0 {
		out.Duration = DefaultDuration
	}
	if out.Producers == 0 {
		out.Producers = DefaultProducers
	}
	if out.Relays == 0 {
		out.Relays = DefaultRelays
	}
	if out.Consumers == 0 {
		out.Consumers = DefaultConsumers
	}
	if out.Keys == 0 {
		out.Keys = DefaultKeys
	}
	if out.Seed == 0 {
		out.Seed = DefaultSeed
	}
	if out.DBFaults == nil {
		out.DBFaults = dbchaos.DefaultKinds
	}
	if out.Log == nil {
		out.Log = io.Discard
	}
	return out
}

func (c *Config) validate() error {
	switch {
	case c.Command == nil:
		return errors.New("Config.Command is nil")
	case c.DatabaseURL == "":
		return errors.New("Config.DatabaseURL is empty: the run needs Postgres")
	case c.Duration < 0 || c.Duration > 24*time.Hour:
		return fmt.Errorf("Config.Duration %v: want up to a day", c.Duration)
	case c.Producers < 0 || c.Relays < 0 || c.Consumers < 0 || c.Producers > 16 || c.Relays > 16 || c.Consumers > 16:
		return errors.New("Config.Producers, Relays and Consumers: want 1 to 16 each")
	case c.Keys < 1 || c.Keys > 10_000:
		return fmt.Errorf("Config.Keys %d: want 1 to 10,000", c.Keys)
	}
	for _, k := range c.DBFaults {
		if _, err := dbfault.ParseKinds(string(k)); err != nil {
			return fmt.Errorf("Config.DBFaults: %w", err)
		}
	}
	return nil
}

// Run runs the chaos run and checks its invariants.
func Run(ctx context.Context, config Config) (*Result, error) {
	cfg := config.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	start := time.Now()
	pool, err := pgxpool.New(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	defer pool.Close()
	schema := "inbox_chaos_outbox_" + testdb.RandomSuffix()
	if err := setup(ctx, pool, schema); err != nil {
		return nil, err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_, err := pool.Exec(dctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
		cleaned(ctx, "schema", schema, err)
	}()
	// The children log in as a role of the run, on which the database
	// faults act.
	childURL := cfg.DatabaseURL
	role, err := childRole(ctx, &cfg, pool, schema)
	if err != nil {
		return nil, err
	}
	if role != nil {
		defer func() { cleaned(ctx, "role", role.Name, role.Drop(context.WithoutCancel(ctx))) }()
		childURL = role.URL
	}
	k, err := broker.OpenKafka("", timings, nil)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, s := range k.Cleanup() {
			command.Cleaned(ctx, "%s", s)
		}
	}()
	topic, err := k.NewTopic(ctx, "orders", &broker.TopicConfig{Partitions: partitions, Subscriptions: []string{consumerName}})
	if err != nil {
		return nil, err
	}
	base := childArgs{databaseURL: childURL, schema: schema, where: topic.Address(consumerName), keys: cfg.Keys}
	sv := &supervisor{cfg: &cfg, base: base, rng: rand.New(rand.NewPCG(cfg.Seed, 0x0b0c5)), kills: map[string]int{}, gen: map[string]int{}}
	defer func() {
		// An interrupted run proves nothing: its children are killed at
		// once rather than asked to stop.
		if n := sv.stopAll(ctx.Err() != nil); n > 0 {
			command.Cleaned(ctx, "stopped %s", command.Count(n, "process", "processes"))
		}
	}()

	fmt.Fprintf(cfg.Log, "chaos-outbox: %d producers, %d relays, %d consumers for %v\n", cfg.Producers, cfg.Relays, cfg.Consumers, cfg.Duration)
	sv.setFaults(true)
	if err := sv.startRoles(ctx, map[string]int{roleProducer: cfg.Producers, roleRelay: cfg.Relays, roleConsumer: cfg.Consumers}); err != nil {
		return nil, err
	}
	res := &Result{DBFaults: map[string]int{}}
	if err := underFire(ctx, &cfg, pool, schema, role, sv, res); err != nil {
		return nil, err
	}
	fmt.Fprintf(cfg.Log, "chaos-outbox: chaos over after %v; draining\n", time.Since(start).Round(time.Millisecond))
	if err := drain(ctx, &cfg, pool, schema, sv); err != nil {
		return nil, err
	}
	if err := tally(ctx, &cfg, pool, schema, topic, sv, res); err != nil {
		return nil, err
	}
	res.DurationS = time.Since(start).Seconds()
	fmt.Fprintf(cfg.Log, "chaos-outbox: done in %v\n", time.Since(start).Round(time.Millisecond))
	return res, nil
}

// childRole creates the role the children log in as, on which the database
// faults act; it returns nil when cfg asks for no database faults.
func childRole(ctx context.Context, cfg *Config, pool *pgxpool.Pool, schema string) (*dbchaos.Role, error) {
	if len(cfg.DBFaults) == 0 {
		return nil, nil
	}
	q := pgx.Identifier{schema}.Sanitize()
	return dbchaos.CreateRole(ctx, pool, cfg.DatabaseURL, schema+"_app", []string{
		`GRANT USAGE ON SCHEMA ` + q,
		`GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA ` + q,
		`GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA ` + q,
	})
}

// startRoles starts n children of each role.
func (s *supervisor) startRoles(ctx context.Context, n map[string]int) error {
	for role, n := range n {
		for slot := range n {
			if err := s.start(ctx, role, slot); err != nil {
				return err
			}
		}
	}
	return nil
}

// underFire is the chaos phase, for cfg.Duration: a kill about every
// second, the children's database sessions terminated about every third,
// and the database faults beside them. It returns when every fault is
// restored.
func underFire(ctx context.Context, cfg *Config, pool *pgxpool.Pool, schema string, role *dbchaos.Role, sv *supervisor, res *Result) error {
	chaosCtx, endChaos := context.WithTimeout(ctx, cfg.Duration)
	defer endChaos()
	faultsDone := make(chan error, 1)
	go func() { faultsDone <- injectFaults(chaosCtx, cfg, pool, schema, role, sv, res) }()
	err := killEverySecond(ctx, chaosCtx, cfg, role, sv, res)
	endChaos()
	faultErr := <-faultsDone // every fault restored
	if err != nil {
		return err
	}
	return faultErr
}

// injectFaults runs the database faults on role's sessions until ctx ends,
// alternating between the outbox and the inbox. It returns the first fault
// that could not be injected or restored, with how many there were.
func injectFaults(ctx context.Context, cfg *Config, pool *pgxpool.Pool, schema string, role *dbchaos.Role, sv *supervisor, res *Result) error {
	if role == nil {
		return nil
	}
	var faultErr error
	faultErrs := 0
	sched := &dbchaos.Schedule{
		Kinds: cfg.DBFaults, Role: role, Pool: pool,
		// The first fault comes within the first three eighths of a
		// short run.
		Every: min(dbchaos.Every, cfg.Duration/4),
		Table: func(i int, _ dbfault.Kind) string {
			if (i/len(cfg.DBFaults))%2 == 0 {
				return pgx.Identifier{schema, "outbox"}.Sanitize()
			}
			return pgx.Identifier{schema, "inbox"}.Sanitize()
		},
		Log: cfg.Log, Prefix: "chaos-outbox",
		Injected: func(k dbfault.Kind) { sv.count(func() { res.DBFaults[string(k)]++ }) },
		Failed: func(err error) {
			fmt.Fprintln(cfg.Log, err)
			sv.count(func() {
				if faultErrs++; faultErr == nil {
					faultErr = err
				}
			})
		},
	}
	sched.Run(ctx, rand.New(rand.NewPCG(cfg.Seed, 0xdbfa)))
	var err error
	sv.count(func() {
		if faultErr != nil {
			err = fmt.Errorf("%w (%d database faults failed)", faultErr, faultErrs)
		}
	})
	return err
}

// killEverySecond kills a random child about every second, and terminates
// the children's database sessions about every third, until chaosCtx ends.
func killEverySecond(ctx, chaosCtx context.Context, cfg *Config, role *dbchaos.Role, sv *supervisor, res *Result) error {
	dbRand := rand.New(rand.NewPCG(cfg.Seed, 0xdb))
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-chaosCtx.Done():
			return nil
		case <-tick.C:
			sv.killRandom()
		}
		if role != nil && n%3 == 0 {
			if k, err := role.Terminate(chaosCtx, dbRand); err != nil && chaosCtx.Err() == nil {
				fmt.Fprintf(cfg.Log, "chaos-outbox: terminate database sessions: %v\n", err)
			} else if k > 0 {
				sv.count(func() { res.DBKills += k })
				fmt.Fprintf(cfg.Log, "chaos-outbox: terminated %d database sessions\n", k)
			}
		}
		if err := sv.failed(); err != nil {
			return err
		}
	}
}

// drain stops the producers and the faults, restarts the relays and the
// consumers, and waits until they have drained the outbox; then it stops
// them.
func drain(ctx context.Context, cfg *Config, pool *pgxpool.Pool, schema string, sv *supervisor) error {
	sv.stopRole(roleProducer)
	sv.setFaults(false)
	sv.stopRole(roleRelay)
	sv.stopRole(roleConsumer)
	if err := sv.startRoles(ctx, map[string]int{roleRelay: cfg.Relays, roleConsumer: cfg.Consumers}); err != nil {
		return err
	}
	if err := waitDrained(ctx, pool, schema, sv); err != nil {
		return err
	}
	sv.stopAll(false)
	return nil
}

// tally checks the invariants into res, counts the records on the topic
// and the kills, and says whether the run is OK.
func tally(ctx context.Context, cfg *Config, pool *pgxpool.Pool, schema string, topic broker.Topic, sv *supervisor, res *Result) error {
	if err := check(ctx, pool, schema, res); err != nil {
		return err
	}
	records, err := topic.Stored(ctx)
	if err != nil {
		return err
	}
	res.Records = int64(records)
	res.Republished = res.Records - res.Orders
	res.ProducerKills, res.RelayKills, res.ConsumerKills = sv.kills[roleProducer], sv.kills[roleRelay], sv.kills[roleConsumer]
	injected := 0
	for _, n := range res.DBFaults {
		injected += n
	}
	res.OK = res.Missing == 0 && res.Orphans == 0 && res.DoubleApplied == 0 && res.OutOfOrder == 0 &&
		(injected > 0 || len(cfg.DBFaults) == 0)
	return nil
}

// setup creates the schema, the inbox and outbox tables, the orders and
// the effects.
func setup(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	if _, err := pool.Exec(ctx, `CREATE SCHEMA `+pgx.Identifier{schema}.Sanitize()); err != nil {
		return fmt.Errorf("create schema: %w", err)
	}
	d, err := inboxpgx.New(pool, &inboxpgx.Config{Tables: inboxdriver.Tables{Schema: schema}})
	if err != nil {
		return err
	}
	if _, err := inboxmigrate.Up(ctx, d); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	orders := pgx.Identifier{schema, "orders"}.Sanitize()
	effects := pgx.Identifier{schema, "effects"}.Sanitize()
	_, err = pool.Exec(ctx, `CREATE TABLE `+orders+` (id uuid PRIMARY KEY, key text NOT NULL);
CREATE TABLE `+effects+` (seq bigserial PRIMARY KEY, event_id uuid NOT NULL, key text NOT NULL, key_seq bigint NOT NULL)`)
	if err != nil {
		return fmt.Errorf("create tables: %w", err)
	}
	return nil
}

// waitDrained waits until the outbox is empty and every order has an
// effect, failing after three minutes.
func waitDrained(ctx context.Context, pool *pgxpool.Pool, schema string, sv *supervisor) error {
	ob := pgx.Identifier{schema, "outbox"}.Sanitize()
	orders := pgx.Identifier{schema, "orders"}.Sanitize()
	effects := pgx.Identifier{schema, "effects"}.Sanitize()
	deadline := time.Now().Add(3 * time.Minute)
	report := time.Now().Add(5 * time.Second)
	for {
		var pending, missing int64
		err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+ob+`),
       (SELECT count(*) FROM `+orders+` o WHERE NOT EXISTS (SELECT FROM `+effects+` e WHERE e.event_id = o.id))`).Scan(&pending, &missing)
		if err != nil {
			return fmt.Errorf("wait for the drain: %w", err)
		}
		if pending == 0 && missing == 0 {
			return nil
		}
		if err := sv.failed(); err != nil {
			return err
		}
		if time.Now().After(report) {
			fmt.Fprintf(sv.cfg.Log, "chaos-outbox: draining: %d events in the outbox, %d orders not yet applied\n", pending, missing)
			report = time.Now().Add(5 * time.Second)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after three minutes of draining, %d events are still in the outbox and %d orders have no effect", pending, missing)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// check counts the violations of the invariants.
func check(ctx context.Context, pool *pgxpool.Pool, schema string, res *Result) error {
	orders := pgx.Identifier{schema, "orders"}.Sanitize()
	effects := pgx.Identifier{schema, "effects"}.Sanitize()
	err := pool.QueryRow(ctx, `SELECT
  (SELECT count(*) FROM `+orders+`),
  (SELECT count(*) FROM `+orders+` o WHERE NOT EXISTS (SELECT FROM `+effects+` e WHERE e.event_id = o.id)),
  (SELECT count(*) FROM `+effects+` e WHERE NOT EXISTS (SELECT FROM `+orders+` o WHERE o.id = e.event_id)),
  (SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM `+effects+` GROUP BY event_id) g WHERE n > 1),
  (SELECT count(*) FROM (
      SELECT key_seq, max(key_seq) OVER (PARTITION BY key ORDER BY seq ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before
        FROM `+effects+`) x WHERE key_seq < before)`).
		Scan(&res.Orders, &res.Missing, &res.Orphans, &res.DoubleApplied, &res.OutOfOrder)
	if err != nil {
		return fmt.Errorf("check: %w", err)
	}
	return nil
}

// supervisor runs the child processes: it starts them, restarts those that
// die, kills them, and counts the kills of each role.
type supervisor struct {
	cfg  *Config
	base childArgs
	rng  *rand.Rand

	mu       sync.Mutex
	procs    []*proc
	faults   bool
	kills    map[string]int
	gen      map[string]int // bumped when a role is stopped
	err      error
	stopping bool
	wg       sync.WaitGroup
}

// proc is one life of a child in a slot.
type proc struct {
	role    string
	slot    int
	cmd     *exec.Cmd
	stopped bool // asked to stop, or killed by the supervisor
	exited  chan struct{}
	stderr  bytes.Buffer
}

func (s *supervisor) setFaults(on bool) {
	s.mu.Lock()
	s.faults = on
	s.mu.Unlock()
}

// start starts a life of role in slot, and restarts it when it dies of a
// kill, until the role is stopped.
func (s *supervisor) start(ctx context.Context, role string, slot int) error {
	a := s.base
	a.role, a.slot = role, slot
	cmd := s.cfg.Command(a.list())
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	s.mu.Lock()
	if s.faults {
		cmd.Env = append(cmd.Env, "INBOX_FAULTS="+roleFaults[role])
	}
	s.mu.Unlock()
	p := &proc{role: role, slot: slot, cmd: cmd, exited: make(chan struct{})}
	cmd.Stderr = &p.stderr
	child.DieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start a %s: %w", role, err)
	}
	s.mu.Lock()
	s.procs = append(s.procs, p)
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		err := cmd.Wait()
		close(p.exited)
		s.mu.Lock()
		defer s.mu.Unlock()
		killed := cmd.ProcessState != nil && cmd.ProcessState.ExitCode() == -1
		switch {
		case p.stopped && !killed:
			return // stopped cleanly
		case killed:
			s.kills[role]++
		case err != nil && s.err == nil:
			s.err = fmt.Errorf("a %s failed: %v: %s", role, err, strings.TrimSpace(p.stderr.String()))
			return
		}
		if p.stopped || s.stopping {
			return
		}
		// A kill at a fault point, or by the supervisor: start again,
		// unless the role is stopped meanwhile.
		gen := s.gen[role]
		go func() {
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
				s.mu.Lock()
				again := !s.stopping && s.gen[role] == gen
				s.mu.Unlock()
				if !again {
					return
				}
				if err := s.start(ctx, role, slot); err != nil {
					s.mu.Lock()
					if s.err == nil {
						s.err = err
					}
					s.mu.Unlock()
				}
			}
		}()
	}()
	return nil
}

// killRandom kills a random running child with SIGKILL; it is started
// again.
func (s *supervisor) killRandom() {
	s.mu.Lock()
	var live []*proc
	for _, p := range s.procs {
		select {
		case <-p.exited:
		default:
			if !p.stopped {
				live = append(live, p)
			}
		}
	}
	if len(live) == 0 {
		s.mu.Unlock()
		return
	}
	p := live[s.rng.IntN(len(live))]
	s.mu.Unlock()
	_ = p.cmd.Process.Kill()
}

// stopRole stops every child of role and waits for them to exit.
func (s *supervisor) stopRole(role string) {
	s.mu.Lock()
	s.gen[role]++
	var ps []*proc
	for _, p := range s.procs {
		if p.role == role && !p.stopped {
			p.stopped = true
			ps = append(ps, p)
		}
	}
	s.mu.Unlock()
	for _, p := range ps {
		stop(p)
	}
}

// stopAll stops every child, or kills it with kill, waits for the
// supervisor's goroutines, and returns how many of them were still
// running.
func (s *supervisor) stopAll(kill bool) int {
	s.mu.Lock()
	s.stopping = true
	var ps []*proc
	for _, p := range s.procs {
		if !p.stopped {
			p.stopped = true
			ps = append(ps, p)
		}
	}
	s.mu.Unlock()
	live := 0
	for _, p := range ps {
		select {
		case <-p.exited:
		default:
			live++
		}
	}
	if kill {
		for _, p := range ps {
			_ = p.cmd.Process.Kill()
		}
	}
	for _, p := range ps {
		stop(p)
	}
	s.wg.Wait()
	return live
}

// cleaned says that the run's cleanup dropped the kind of thing name, or
// why it could not, for the line of an interrupted run.
func cleaned(ctx context.Context, kind, name string, err error) {
	if err != nil {
		command.Cleaned(ctx, "could not drop %s %s (%s)", kind, name, command.Message(err))
		return
	}
	command.Cleaned(ctx, "dropped %s %s", kind, name)
}

// stop asks p to stop, and kills it if it has not within ten seconds.
func stop(p *proc) {
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		_ = p.cmd.Process.Kill()
	}
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// count runs f under the supervisor's lock.
func (s *supervisor) count(f func()) {
	s.mu.Lock()
	f()
	s.mu.Unlock()
}

// failed returns the first failure of a child, if any.
func (s *supervisor) failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}
