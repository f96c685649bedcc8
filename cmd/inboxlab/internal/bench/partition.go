package bench

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxmigrate"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/inboxtype"
	"github.com/txinbox/inbox/internal/uuid"
)

// The partitioned inbox of the retention comparison: partitionBackfill
// back and partitionPremake ahead of today, partitionCount day partitions
// in all.
const (
	partitionBackfill = 32 * 24 * time.Hour
	partitionPremake  = 7 * 24 * time.Hour
	partitionCount    = 40
)

// runPartition compares the two ways of retention on Postgres, in the same
// run: a purge of Config.PurgeRows expired rows by batched DELETE from the
// plain inbox, against the drop of a day partition that holds as many rows
// (DETACH PARTITION … CONCURRENTLY, then DROP TABLE), and claims'
// throughput on the partitioned inbox with 40 partitions against the plain
// one.
//
// Each retention is measured twice. Alone, with nothing else running: its
// time and the WAL it wrote (the pg_current_wal_lsn() delta; the LSN is
// cluster-wide, so other sessions can only add to it). Then under load:
// claims on the same table without it, during it, and without it again,
// while a long transaction (a claim left open) is held, for
// Config.PurgeBaseline, or until the retention is done; the baseline is
// the claims before and after it together. The drop's detach waits for that
// transaction to end; the claims do not wait for the detach.
func (b *bench) runPartition(ctx context.Context) (*PartitionResult, error) {
	s, err := b.setUpRetention(ctx)
	if err != nil {
		return nil, err
	}
	defer s.side.Close()
	res := &PartitionResult{Rows: b.cfg.PurgeRows, Workers: b.maxW, Partitions: len(s.state.Partitions), HoldS: b.cfg.PurgeBaseline.Seconds()}
	if err := b.compareClaims(ctx, s, res); err != nil {
		return nil, err
	}
	if err := b.compareRetention(ctx, s, res); err != nil {
		return nil, err
	}
	return res, nil
}

// retentionSetup is the two inboxes of the retention comparison, plain
// and partitioned.
type retentionSetup struct {
	// side is the pool of the maintenance and the long transaction.
	side                  *pgxpool.Pool
	plainTable, partTable string
	plainClean, partClean *retentionClient
	// plainClaims and partClaims are the claims on each inbox.
	plainClaims, partClaims *row
	// state is the partitioned inbox's partitions when it was made.
	state *inboxtype.PartitionState
}

// setUpRetention makes the side pool and the two inboxes of the retention
// comparison. The caller closes s.side.
func (b *bench) setUpRetention(ctx context.Context) (_ *retentionSetup, err error) {
	pcfg := b.admin.Config().Copy()
	pcfg.MaxConns, pcfg.MinConns = 4, 0
	side, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("partitions: %w", err)
	}
	defer func() {
		if err != nil {
			side.Close()
		}
	}()

	plainTables := inboxdriver.Tables{Schema: b.schema, Inbox: "retention_plain", DeadLetters: "retention_plain_dead_letters",
		Effects: "retention_plain_effects", Migrations: "retention_plain_migrations"}
	partTables := inboxdriver.Tables{Schema: b.schema, Inbox: "retention_part", DeadLetters: "retention_part_dead_letters",
		Effects: "retention_part_effects", Migrations: "retention_part_migrations", Layout: inboxdriver.LayoutPartitioned}
	partCfg := inboxdriver.PartitionConfig{Backfill: partitionBackfill, Premake: partitionPremake}
	plain, plainClean, err := b.retentionInbox(ctx, side, plainTables, partCfg)
	if err != nil {
		return nil, err
	}
	part, partClean, err := b.retentionInbox(ctx, side, partTables, partCfg)
	if err != nil {
		return nil, err
	}
	st, err := partClean.Admin().Partitions(ctx)
	if err != nil {
		return nil, err
	}
	claimsOn := func(c *inbox.Client[pgx.Tx]) *row {
		return &row{name: "inbox", batch: 1, op: func(ctx context.Context, b *bench, w *worker) error {
			return process(ctx, c, b.pg.handler, w.next(b, 1)[0], inbox.Applied)
		}}
	}
	return &retentionSetup{
		side:       side,
		plainTable: b.table(plainTables.Inbox), partTable: b.table(partTables.Inbox),
		plainClean: plainClean, partClean: partClean,
		plainClaims: claimsOn(plain), partClaims: claimsOn(part),
		state: st,
	}, nil
}

// compareClaims measures claims' throughput, plain against partitioned, in
// alternating rounds after a warm-up of each.
func (b *bench) compareClaims(ctx context.Context, s *retentionSetup, res *PartitionResult) error {
	n := b.maxW
	rounds := max(5, b.cfg.IDRounds)
	b.logf("partitions: claims on the plain inbox and on %d partitions, %d rounds of %v", res.Partitions, rounds, b.cfg.IDDuration)
	for _, r := range []*row{s.plainClaims, s.partClaims} {
		if _, err := b.timed(ctx, r, n, idV7, b.cfg.Warmup+b.cfg.IDDuration/2); err != nil {
			return err
		}
	}
	var plainRuns, partRuns []run
	var plainCPU, partCPU usage
	for i := range rounds {
		order := []*row{s.plainClaims, s.partClaims}
		if i%2 == 1 {
			slices.Reverse(order)
		}
		for _, r := range order {
			x, u, err := b.measured(ctx, r, n, idV7, b.cfg.IDDuration)
			if err != nil {
				return err
			}
			if r == s.plainClaims {
				plainRuns = append(plainRuns, x)
				plainCPU = addUsage(plainCPU, u, i == 0)
			} else {
				partRuns = append(partRuns, x)
				partCPU = addUsage(partCPU, u, i == 0)
			}
		}
	}
	res.PlainClaims, res.PartitionedClaims = medianFigures(plainRuns), medianFigures(partRuns)
	if res.PlainClaims.MsgsPerS > 0 {
		res.ClaimsRatio = round2(res.PartitionedClaims.MsgsPerS / res.PlainClaims.MsgsPerS)
	}
	if plainCPU.serverOK && partCPU.serverOK {
		res.PlainServerCPUUsPerClaim = usPerMsg(plainCPU.server, res.PlainClaims.Msgs)
		res.PartitionedServerCPUUsPerClaim = usPerMsg(partCPU.server, res.PartitionedClaims.Msgs)
	}
	return nil
}

// compareRetention measures the batched delete against the drop of a day
// partition, alone and then under load.
func (b *bench) compareRetention(ctx context.Context, s *retentionSetup, res *PartitionResult) error {
	// The days the drops take: the oldest partition alone, then the next
	// dropTrials under load.
	st := s.state
	days := st.Partitions
	if len(days) < 2+dropTrials {
		return fmt.Errorf("partitions: want at least %d partitions, got %d", 2+dropTrials, len(days))
	}
	deleteOnce := func(ctx context.Context, rest float64) error {
		cfg := &inbox.Config{PurgeBatchSize: b.cfg.PurgeBatchSize, PurgeRest: rest}
		c, err := inbox.NewClient(s.plainClean.driver, cfg)
		if err != nil {
			return err
		}
		got, err := c.Admin().Purge(ctx, inbox.PurgeParams{OlderThan: purgeWindow})
		if err == nil && got != int64(b.cfg.PurgeRows) {
			err = fmt.Errorf("purge deleted %d rows, want %d", got, b.cfg.PurgeRows)
		}
		return err
	}
	dropOnce := func(day inboxtype.Partition) func(ctx context.Context, _ float64) error {
		return func(ctx context.Context, _ float64) error {
			// Retention up to the day's end: that day, and only it, goes.
			retention := st.Now.Sub(day.To).Truncate(time.Hour) - time.Hour
			rep, err := s.partClean.Admin().PartitionMaintain(ctx, inboxtype.PartitionMaintainParams{Drop: true, Retention: retention})
			if err != nil {
				return err
			}
			if len(rep.Dropped) != 1 || rep.Dropped[0].Name != day.Name {
				return fmt.Errorf("the drop of %s dropped %+v", day.Name, rep.Dropped)
			}
			return nil
		}
	}
	fillPlain := func(ctx context.Context) error {
		return fillTimeOrdered(ctx, b.admin, s.plainTable, b.cfg.PurgeRows, purgeAge)
	}
	fillDay := func(day inboxtype.Partition) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			return fillTimeOrdered(ctx, b.admin, s.partTable, b.cfg.PurgeRows, time.Since(day.From.Add(time.Hour)))
		}
	}

	var err error
	b.logf("partitions: batched delete of %d rows alone", b.cfg.PurgeRows)
	if res.Delete.S, res.Delete.WALBytes, err = b.alone(ctx, fillPlain, deleteOnce); err != nil {
		return err
	}
	b.logf("partitions: drop of a day of %d rows alone", b.cfg.PurgeRows)
	if res.Drop.S, res.Drop.WALBytes, err = b.alone(ctx, fillDay(days[0]), dropOnce(days[0])); err != nil {
		return err
	}
	if res.Drop.WALBytes > 0 {
		res.WALRatio = round1(float64(res.Delete.WALBytes) / float64(res.Drop.WALBytes))
	}

	b.logf("partitions: batched delete under claims, a long transaction open")
	if err := b.underLoad(ctx, s.side, s.plainTable, s.plainClaims, fillPlain, deleteOnce, &res.Delete); err != nil {
		return err
	}
	// One drop under load is a single event in a window of seconds, and
	// the machine's drift moves a window's p99 by more than the drop does:
	// the drop is taken dropTrials times, each day in turn, and the ratio
	// is the median trial's.
	trials := make([]RetentionFigures, dropTrials)
	for i := range trials {
		b.logf("partitions: drop under claims, a long transaction open (%d of %d)", i+1, dropTrials)
		if err := b.underLoad(ctx, s.side, s.partTable, s.partClaims, fillDay(days[1+i]), dropOnce(days[1+i]), &trials[i]); err != nil {
			return err
		}
	}
	res.Drop = medianTrial(res.Drop, trials)
	return nil
}

// dropTrials is how many times the partition drop is measured under load.
const dropTrials = 5

// medianTrial returns f with the under-load figures of the trial whose p99
// ratio is the median, and every trial's ratio.
func medianTrial(f RetentionFigures, trials []RetentionFigures) RetentionFigures {
	sorted := slices.Clone(trials)
	slices.SortFunc(sorted, func(a, b RetentionFigures) int { return cmp.Compare(a.P99Ratio, b.P99Ratio) })
	m := sorted[(len(sorted)-1)/2]
	f.UnderLoadS, f.Without, f.During, f.P99Ratio = m.UnderLoadS, m.Without, m.During, m.P99Ratio
	f.P99Ratios = nil
	for _, t := range trials {
		f.P99Ratios = append(f.P99Ratios, t.P99Ratio)
	}
	return f
}

// retentionClient is a client of the retention comparison's maintenance,
// on the side pool, and its driver.
type retentionClient struct {
	*inbox.Client[pgx.Tx]
	driver *inboxpgx.Driver
}

// retentionInbox migrates the inbox of tables and returns a client whose
// claims run on the workers' pool, and one for maintenance on side.
func (b *bench) retentionInbox(ctx context.Context, side *pgxpool.Pool, tables inboxdriver.Tables, pc inboxdriver.PartitionConfig) (*inbox.Client[pgx.Tx], *retentionClient, error) {
	ad, err := inboxpgx.New(side, &inboxpgx.Config{Tables: tables, Partitions: pc})
	if err != nil {
		return nil, nil, err
	}
	if _, err := inboxmigrate.Up(ctx, ad); err != nil {
		return nil, nil, fmt.Errorf("migrate %s: %w", tables.Inbox, err)
	}
	d, err := inboxpgx.New(b.pool, &inboxpgx.Config{Tables: tables, Partitions: pc})
	if err != nil {
		return nil, nil, err
	}
	c, err := inbox.NewClient(d, nil)
	if err != nil {
		return nil, nil, err
	}
	mc, err := inbox.NewClient(ad, nil)
	if err != nil {
		return nil, nil, err
	}
	return c, &retentionClient{Client: mc, driver: ad}, nil
}

// alone fills, then times op with nothing else running, and reads the WAL
// it wrote. op runs with a purge's rest of none.
func (b *bench) alone(ctx context.Context, fill func(context.Context) error, op func(context.Context, float64) error) (float64, int64, error) {
	if err := fill(ctx); err != nil {
		return 0, 0, err
	}
	if _, err := b.admin.Exec(ctx, `CHECKPOINT`); err != nil {
		b.logf("partitions: no CHECKPOINT before the measurement (%v)", err)
	}
	l0, err := b.lsn(ctx)
	if err != nil {
		return 0, 0, err
	}
	start := time.Now()
	if err := op(ctx, -1); err != nil {
		return 0, 0, fmt.Errorf("partitions: %w", err)
	}
	elapsed := time.Since(start)
	l1, err := b.lsn(ctx)
	if err != nil {
		return 0, 0, err
	}
	return round2(elapsed.Seconds()), l1 - l0, nil
}

// underLoad fills, then measures claims on table for Config.PurgeBaseline
// with a long transaction open, then again while op runs, with a long
// transaction open for Config.PurgeBaseline or until op is done, then again
// as at first. op runs with the client's default rest, as a cleaner does.
func (b *bench) underLoad(ctx context.Context, side *pgxpool.Pool, table string, claims *row, fill func(context.Context) error,
	op func(context.Context, float64) error, out *RetentionFigures) error {
	if err := fill(ctx); err != nil {
		return err
	}
	n := b.maxW
	if _, err := b.timed(ctx, claims, n, idV7, b.cfg.Warmup); err != nil {
		return err
	}
	hold := b.cfg.PurgeBaseline
	// The baseline: claims with a long transaction open throughout, before
	// the retention and again after it.
	baseline := func() (run, error) {
		end, err := b.holdOpen(ctx, side, table, hold)
		if err != nil {
			return run{}, err
		}
		r, err := b.timed(ctx, claims, n, idV7, hold)
		if cerr := end(); err == nil {
			err = cerr
		}
		return r, err
	}
	before, err := baseline()
	if err != nil {
		return err
	}

	end, err := b.holdOpen(ctx, side, table, hold)
	if err != nil {
		return err
	}
	stop := make(chan struct{})
	var (
		operr   error
		elapsed time.Duration
	)
	go func() {
		defer close(stop)
		start := time.Now()
		operr = op(ctx, 0)
		elapsed = time.Since(start)
	}()
	during, err := b.drive(ctx, claims, n, idV7, stop)
	<-stop
	if cerr := end(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if operr != nil {
		return fmt.Errorf("partitions: %w", operr)
	}
	after, err := baseline()
	if err != nil {
		return err
	}
	out.UnderLoadS = round2(elapsed.Seconds())
	out.Without, out.During = figures(join(before, after)), figures(during)
	if out.Without.P99Ms > 0 {
		out.P99Ratio = round2(out.During.P99Ms / out.Without.P99Ms)
	}
	return nil
}

// holdOpen opens a long transaction on table, a claim left open, and ends
// it after d, or when the returned function is called.
func (b *bench) holdOpen(ctx context.Context, side *pgxpool.Pool, table string, d time.Duration) (end func() error, err error) {
	tx, err := side.Begin(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO `+table+` (consumer_name, message_id) VALUES ('long-transaction', $1)`, uuid.V7(time.Now())); err != nil {
		rollback(ctx, tx)
		return nil, fmt.Errorf("partitions: open the long transaction: %w", err)
	}
	done := make(chan error, 1)
	timer := time.AfterFunc(d, func() { done <- tx.Rollback(context.WithoutCancel(ctx)) })
	return func() error {
		if timer.Stop() {
			return tx.Rollback(context.WithoutCancel(ctx))
		}
		return <-done
	}, nil
}

// medianFigures are the figures of the run of median rate, with the
// latencies of every run.
func medianFigures(runs []run) Figures {
	if len(runs) == 0 {
		return Figures{}
	}
	rates := make([]float64, len(runs))
	all := run{}
	for i, r := range runs {
		rates[i] = r.rate()
		all.msgs += r.msgs
		all.elapsed += r.elapsed
		all.lat = append(all.lat, r.lat...)
	}
	f := figures(all)
	f.MsgsPerS = round1(median(rates))
	return f
}

// addUsage adds u to sum; first starts the sum.
func addUsage(sum, u usage, first bool) usage {
	if first {
		return u
	}
	return usage{wal: sum.wal + u.wal, server: sum.server + u.server, serverOK: sum.serverOK && u.serverOK, client: sum.client + u.client}
}
