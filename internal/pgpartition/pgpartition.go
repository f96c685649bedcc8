// Package pgpartition keeps the day partitions of a Postgres inbox in the
// partitioned layout (inboxdriver.LayoutPartitioned): it lists them, makes
// the missing ones ahead, drops the expired ones, and says why a claim
// found no partition. Both Postgres stores (inboxpgx and inboxsql) run it
// over a small DB interface, so that the DDL and its order exist once.
//
// Nothing here blocks a claim. A claim holds ROW EXCLUSIVE on the parent
// table until it commits, and:
//
//   - a partition is made with CREATE TABLE … (LIKE parent) then ATTACH
//     PARTITION, which takes SHARE UPDATE EXCLUSIVE on the parent, where
//     CREATE TABLE … PARTITION OF would wait behind every open claim, and
//     every claim after it behind it;
//   - a partition is dropped with DETACH PARTITION … CONCURRENTLY, which
//     waits for the claims that may see it without stopping new ones, then
//     DROP TABLE of the detached table, where a plain DROP or DETACH needs
//     ACCESS EXCLUSIVE on the parent and stalls every claim behind the
//     longest open one.
//
// A run stopped between its steps leaves either a detach pending, which
// the next run finishes (DETACH … FINALIZE), or a detached table named as
// a partition, which the next run drops, or attaches again if its days have
// not expired. Making a partition is one transaction.
package pgpartition

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxtype"
)

// DB is what maintenance needs of a Postgres store.
type DB interface {
	// Query runs query and calls row once per row, with a function that
	// scans it.
	Query(ctx context.Context, query string, args []any, row func(scan func(dest ...any) error) error) error
	// Exec runs one statement on its own, outside any transaction.
	Exec(ctx context.Context, query string, args ...any) error
	// Tx runs stmts, which take no arguments, in one transaction.
	Tx(ctx context.Context, stmts ...string) error
	// WithLock is inboxdriver.Admin.WithLock.
	WithLock(ctx context.Context, key string, fn func(ctx context.Context) error) (bool, error)
}

// day is the span of one partition.
const day = 24 * time.Hour

// ddlLockTimeout bounds the lock waits of making a partition: the locks it
// takes do not conflict with claims, only with other DDL, such as a
// migration or an operator's ALTER TABLE. The next run tries again.
const ddlLockTimeout = "5s"

// minServerVersion is Postgres 14, the first with DETACH PARTITION …
// CONCURRENTLY.
const minServerVersion = 140000

// Maintainer keeps the partitions of one inbox table.
type Maintainer struct {
	db     DB
	t      inboxdriver.Tables
	cfg    inboxdriver.PartitionConfig
	parent string // the inbox, quoted and qualified
}

// New returns a maintainer of the inbox of t, whose layout must be
// partitioned, over db.
func New(db DB, t inboxdriver.Tables, cfg inboxdriver.PartitionConfig) *Maintainer {
	return &Maintainer{db: db, t: t, cfg: cfg.WithDefaults(), parent: t.Qualify(inboxdriver.DialectPostgres, t.Inbox)}
}

// Config returns the partition settings, with defaults applied.
func (m *Maintainer) Config() inboxdriver.PartitionConfig { return m.cfg }

// name is the partition of the day that starts at d.
func (m *Maintainer) name(d time.Time) string { return m.t.Inbox + "_p" + d.UTC().Format("20060102") }

func (m *Maintainer) qualify(name string) string {
	return m.t.Qualify(inboxdriver.DialectPostgres, name)
}

var boundRE = regexp.MustCompile(`^FOR VALUES FROM \('([0-9a-f-]{36})'\) TO \('([0-9a-f-]{36})'\)$`)

// missingTableError says that the inbox table does not exist. It carries
// the SQLSTATE that Postgres gives a statement on a missing table
// (undefined_table), so that the stores classify it as they classify the
// server's own: inboxdriver.ClassNotMigrated, which the root package
// reports as inbox.ErrNotMigrated and the inbox command as its hint to run
// 'inbox migrate up'.
type missingTableError struct{ table, op string }

func (e *missingTableError) Error() string {
	return fmt.Sprintf("inbox: %sthe inbox table %s does not exist", e.op, e.table)
}

// SQLState returns Postgres's undefined_table.
func (e *missingTableError) SQLState() string { return "42P01" }

// State lists the partitions, on the database's clock.
func (m *Maintainer) State(ctx context.Context) (*inboxtype.PartitionState, error) {
	st := &inboxtype.PartitionState{}
	var kind string
	var version int
	found := false
	err := m.db.Query(ctx, `SELECT now(), current_setting('server_version_num')::int, c.relkind::text
  FROM pg_class c WHERE c.oid = to_regclass($1)`, []any{m.parent}, func(scan func(...any) error) error {
		found = true
		return scan(&st.Now, &version, &kind)
	})
	switch {
	case err != nil:
		return nil, err
	case !found:
		return nil, &missingTableError{table: m.parent}
	case kind != "p":
		return nil, fmt.Errorf("inbox: the inbox table %s is not partitioned: it was migrated with the plain layout, so configure the store with Tables.Layout %q, or move it to the partitioned layout with 'inbox partitions adopt'", m.parent, inboxdriver.LayoutPlain)
	case version < minServerVersion:
		return nil, fmt.Errorf("inbox: the partitioned inbox needs Postgres 14 or later, for DETACH PARTITION … CONCURRENTLY; the server is %d", version)
	}
	st.Now = st.Now.UTC()
	// A table dropped while this reads has no bounds or size left: it is
	// passed over.
	err = m.db.Query(ctx, `SELECT c.relname::text, coalesce(pg_get_expr(c.relpartbound, c.oid), ''), i.inhdetachpending,
       c.reltuples::bigint, coalesce(pg_total_relation_size(c.oid), 0)
  FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
 WHERE i.inhparent = to_regclass($1)
 ORDER BY c.relname`, []any{m.parent}, func(scan func(...any) error) error {
		var p inboxtype.Partition
		var bound string
		if err := scan(&p.Name, &bound, &p.DetachPending, &p.Rows, &p.Bytes); err != nil {
			return err
		}
		if bound == "" {
			return nil
		}
		b := boundRE.FindStringSubmatch(bound)
		if b == nil {
			return fmt.Errorf("inbox: partition %q of %s has the bounds %q: the partitioned inbox takes ranges of ids only, and no DEFAULT partition, which would take ids of any time and forbid detaching concurrently: detach it", p.Name, m.parent, bound)
		}
		var ok1, ok2 bool
		p.From, ok1 = inboxdriver.IDTime(b[1])
		p.To, ok2 = inboxdriver.IDTime(b[2])
		if !ok1 || !ok2 {
			return fmt.Errorf("inbox: partition %q of %s: cannot read the bounds %q", p.Name, m.parent, bound)
		}
		st.Partitions = append(st.Partitions, p)
		return nil
	})
	if err != nil {
		return nil, err
	}
	sortPartitions(st.Partitions)
	err = m.db.Query(ctx, `SELECT c.relname::text, c.reltuples::bigint, coalesce(pg_total_relation_size(c.oid), 0)
  FROM pg_class c
 WHERE c.relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = to_regclass($1))
   AND c.relkind = 'r' AND NOT c.relispartition
   AND length(c.relname) = length($2) + 10 AND left(c.relname, length($2) + 2) = $2 || '_p'
   AND right(c.relname, 8) ~ '^[0-9]{8}$'
 ORDER BY c.relname`, []any{m.parent, m.t.Inbox}, func(scan func(...any) error) error {
		var p inboxtype.Partition
		if err := scan(&p.Name, &p.Rows, &p.Bytes); err != nil {
			return err
		}
		d, err := time.Parse("20060102", p.Name[len(p.Name)-8:])
		if err != nil {
			return nil // not a day: not ours
		}
		p.From, p.To = d, d.Add(day)
		st.Detached = append(st.Detached, p)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if st.Frozen, err = m.frozenState(ctx); err != nil {
		return nil, err
	}
	return st, nil
}

func sortPartitions(ps []inboxtype.Partition) {
	for i := 1; i < len(ps); i++ {
		for j := i; j > 0 && ps[j].From.Before(ps[j-1].From); j-- {
			ps[j], ps[j-1] = ps[j-1], ps[j]
		}
	}
}

// LockKey is the store-wide lock that one maintainer holds.
func (m *Maintainer) LockKey() string {
	return "inbox-partitions:" + m.t.Schema + "." + m.t.Inbox
}

// Maintain runs maintenance as p says, under the maintainers' lock.
func (m *Maintainer) Maintain(ctx context.Context, p *inboxtype.PartitionMaintainParams) (*inboxtype.PartitionMaintainReport, error) {
	if p.Drop && p.Retention <= 0 {
		return nil, fmt.Errorf("inbox: partition maintenance: Retention must be positive to drop partitions, got %v", p.Retention)
	}
	finalized, err := m.finishDetaches(ctx, p.DryRun)
	if err != nil {
		return &inboxtype.PartitionMaintainReport{Finalized: finalized}, err
	}
	var rep *inboxtype.PartitionMaintainReport
	ran, err := m.db.WithLock(ctx, m.LockKey(), func(ctx context.Context) error {
		var err error
		rep, err = m.maintain(ctx, p)
		return err
	})
	if !ran && err == nil {
		rep = &inboxtype.PartitionMaintainReport{Skipped: true}
	}
	if rep != nil {
		rep.Finalized = finalized
	}
	return rep, err
}

// finishDetaches finishes the detaches that an earlier run left pending (a
// DETACH … CONCURRENTLY cancelled, or whose session died): a pending
// partition takes no rows, and the parent cannot detach another
// concurrently until it is finished. It runs before the maintainers' lock
// is taken, since FINALIZE waits for every transaction older than it to
// end, and the lock's transaction is one. Two maintainers that finish the
// same detach are put in turn by the parent's lock, and the second finds
// it finished; one that finds a detach that a running maintainer has under
// way waits for it. A dry run finishes none, and returns those it would.
func (m *Maintainer) finishDetaches(ctx context.Context, dryRun bool) ([]inboxtype.Partition, error) {
	st, err := m.State(ctx)
	if err != nil {
		return nil, err
	}
	var done []inboxtype.Partition
	for _, part := range st.Partitions {
		if !part.DetachPending {
			continue
		}
		if !dryRun {
			if err := m.db.Exec(ctx, `ALTER TABLE `+m.parent+` DETACH PARTITION `+m.qualify(part.Name)+` FINALIZE`); err != nil && m.detachPending(ctx, part.Name) {
				return done, fmt.Errorf("inbox: finish the detach of partition %s: %w", part.Name, err)
			}
		}
		done = append(done, part)
	}
	return done, nil
}

// detachPending reports whether partition name is still pending detach, or
// the state cannot be read: false when another maintainer finished it.
func (m *Maintainer) detachPending(ctx context.Context, name string) bool {
	st, err := m.State(ctx)
	if err != nil {
		return true
	}
	for _, part := range st.Partitions {
		if part.Name == name {
			return part.DetachPending
		}
	}
	return false
}

// maintain is Maintain under the lock, after the pending detaches were
// finished. Its steps come in this order: make the partitions missing
// ahead, settle the tables an earlier run left detached, then drop the
// expired partitions.
func (m *Maintainer) maintain(ctx context.Context, p *inboxtype.PartitionMaintainParams) (*inboxtype.PartitionMaintainReport, error) {
	st, err := m.State(ctx)
	if err != nil {
		return nil, err
	}
	rep := &inboxtype.PartitionMaintainReport{Now: st.Now, State: st}
	// First make the partitions missing ahead, after the newest: never
	// before the oldest, so that a day dropped stays dropped and its
	// replays stay refused. They come first because a drop below may wait
	// long, for the longest transaction on the inbox to end.
	if p.Premake {
		if err := m.premake(ctx, st, p.DryRun, rep); err != nil {
			return rep, err
		}
	}
	// The partitions whose days all end by cutoff have expired.
	var cutoff time.Time
	if p.Drop {
		cutoff = st.Now.Add(-p.Retention)
	}
	attached, err := m.settleDetached(ctx, st, p, cutoff, rep)
	if err != nil {
		return rep, err
	}
	if p.Drop {
		if err := m.dropExpired(ctx, st, attached, cutoff, p.DryRun, rep); err != nil {
			return rep, err
		}
	}

	if p.DryRun {
		return rep, nil
	}
	rep.State, err = m.State(ctx)
	return rep, err
}

// premake makes the day partitions from the end of the newest partition
// of st (or, with none, from Backfill ago) to Premake ahead, adding them
// to rep.Created.
func (m *Maintainer) premake(ctx context.Context, st *inboxtype.PartitionState, dryRun bool, rep *inboxtype.PartitionMaintainReport) error {
	var live []inboxtype.Partition
	for _, part := range st.Partitions {
		if !part.DetachPending {
			live = append(live, part)
		}
	}
	end := st.Now.Add(m.cfg.Premake).Truncate(day).Add(day)
	start := st.Now.Add(-m.cfg.Backfill).Truncate(day)
	if n := len(live); n > 0 {
		start = live[n-1].To
		if !start.Truncate(day).Equal(start) {
			return fmt.Errorf("inbox: partition %s ends at %s, not at the start of a day: maintenance makes day partitions only", live[n-1].Name, start.Format(time.RFC3339Nano))
		}
	}
	for d, n := start, 0; d.Before(end); d, n = d.Add(day), n+1 {
		if n == inboxdriver.MaxPartitionsPerRun {
			return fmt.Errorf("inbox: partition maintenance stopped after making %d partitions, up to %s: run it again", n, d.Format(time.DateOnly))
		}
		part := inboxtype.Partition{Name: m.name(d), From: d, To: d.Add(day)}
		if !dryRun {
			if err := m.create(ctx, part); err != nil {
				return err
			}
		}
		rep.Created = append(rep.Created, part)
	}
	return nil
}

// settleDetached drops, when p.Drop, the tables an earlier run left
// detached whose days ended by cutoff, and attaches the others again. It
// returns the attached partitions, in order, with those it attached again.
func (m *Maintainer) settleDetached(ctx context.Context, st *inboxtype.PartitionState, p *inboxtype.PartitionMaintainParams, cutoff time.Time, rep *inboxtype.PartitionMaintainReport) ([]inboxtype.Partition, error) {
	// The detaches an earlier run left pending were finished before the
	// lock was taken (finishDetaches): a dry run finds them pending still,
	// and says what it would do with them. One pending now was left by a
	// run that stopped after that: it is the next run's.
	detached := append([]inboxtype.Partition(nil), st.Detached...)
	var attached []inboxtype.Partition
	for _, part := range st.Partitions {
		switch {
		case !part.DetachPending:
			attached = append(attached, part)
		case p.DryRun:
			detached = append(detached, part)
		}
	}

	// Tables left detached, by a run that dropped partitions and stopped
	// before the drop: drop the expired ones, and attach again those that
	// a longer retention keeps. A detached table took no row after its
	// detach began, so it holds every row of its days that was ever
	// claimed. A run that does not drop leaves them.
	for _, part := range detached {
		switch {
		case !p.Drop:
		case !part.To.After(cutoff):
			if err := m.drop(ctx, part, p.DryRun); err != nil {
				return nil, err
			}
			rep.Dropped = append(rep.Dropped, part)
		default:
			if !p.DryRun {
				if err := m.db.Tx(ctx, `SET LOCAL lock_timeout = '`+ddlLockTimeout+`'`,
					`ALTER TABLE `+m.parent+` ATTACH PARTITION `+m.qualify(part.Name)+` FOR VALUES FROM ('`+
						inboxdriver.TimeBound(part.From)+`') TO ('`+inboxdriver.TimeBound(part.To)+`')`); err != nil {
					return nil, fmt.Errorf("inbox: attach the detached partition %s again: %w", part.Name, err)
				}
			}
			rep.Reattached = append(rep.Reattached, part)
			attached = append(attached, part)
		}
	}
	sortPartitions(attached)
	return attached, nil
}

// dropExpired drops the attached partitions whose days ended by cutoff,
// oldest first, then the frozen plain table of an adopted inbox once none
// of its ids could be claimed again.
func (m *Maintainer) dropExpired(ctx context.Context, st *inboxtype.PartitionState, attached []inboxtype.Partition, cutoff time.Time, dryRun bool, rep *inboxtype.PartitionMaintainReport) error {
	kept := attached[:0:0]
	for _, part := range attached {
		if part.To.After(cutoff) {
			kept = append(kept, part)
			continue
		}
		if !dryRun {
			if err := m.db.Exec(ctx, `ALTER TABLE `+m.parent+` DETACH PARTITION `+m.qualify(part.Name)+` CONCURRENTLY`); err != nil {
				return fmt.Errorf("inbox: detach partition %s: %w", part.Name, err)
			}
		}
		if err := m.drop(ctx, part, dryRun); err != nil {
			return err
		}
		rep.Dropped = append(rep.Dropped, part)
	}
	if st.Frozen == nil {
		return nil
	}
	retired, err := m.retireFrozen(ctx, st.Frozen, kept, st.Now, dryRun)
	if err != nil {
		return err
	}
	if retired {
		rep.Retired = st.Frozen
	}
	return nil
}

// create makes one partition: a table like the parent, then attached, in
// one transaction. The parent's indexes are built on the new, empty table
// as it is attached.
func (m *Maintainer) create(ctx context.Context, part inboxtype.Partition) error {
	q := m.qualify(part.Name)
	err := m.db.Tx(ctx,
		`SET LOCAL lock_timeout = '`+ddlLockTimeout+`'`,
		`CREATE TABLE `+q+` (LIKE `+m.parent+` INCLUDING DEFAULTS INCLUDING CONSTRAINTS)`,
		`ALTER TABLE `+m.parent+` ATTACH PARTITION `+q+` FOR VALUES FROM ('`+
			inboxdriver.TimeBound(part.From)+`') TO ('`+inboxdriver.TimeBound(part.To)+`')`)
	if err != nil {
		return fmt.Errorf("inbox: make partition %s: %w", part.Name, err)
	}
	return nil
}

// drop drops a detached partition, and the effect-ledger entries of the
// messages of its days, as Purge does with the rows it deletes.
func (m *Maintainer) drop(ctx context.Context, part inboxtype.Partition, dryRun bool) error {
	if dryRun {
		return nil
	}
	if err := m.db.Exec(ctx, `DROP TABLE `+m.qualify(part.Name)); err != nil {
		return fmt.Errorf("inbox: drop the detached partition %s: %w", part.Name, err)
	}
	effects := m.t.Qualify(inboxdriver.DialectPostgres, m.t.Effects)
	if err := m.db.Exec(ctx, `DELETE FROM `+effects+` WHERE message_id >= $1::uuid AND message_id < $2::uuid`,
		inboxdriver.TimeBound(part.From), inboxdriver.TimeBound(part.To)); err != nil {
		return fmt.Errorf("inbox: delete the effect-ledger entries of the dropped partition %s: %w", part.Name, err)
	}
	return nil
}

// Miss returns the error of a claim of ids that failed with cause because
// no partition covers one of them: a NoPartitionError that says which id
// and why, read from the partitions as they are now.
func (m *Maintainer) Miss(ctx context.Context, ids []string, cause error) error {
	st, err := m.State(ctx)
	if err != nil {
		return fmt.Errorf("%w (and reading the partitions to say why failed: %w)", cause, err)
	}
	oldest, newest := st.Range()
	for _, id := range ids {
		t, ok := inboxdriver.IDTime(id)
		if !ok || st.Covers(t) {
			continue
		}
		return &inboxdriver.NoPartitionError{ID: id, Time: t, Miss: inboxdriver.ClassifyMiss(st, t, m.cfg.MaxSkew),
			Oldest: oldest, Newest: newest, Err: cause}
	}
	// Every id is covered now: maintenance made the partition since.
	e := &inboxdriver.NoPartitionError{Miss: inboxdriver.MissNotMade, Oldest: oldest, Newest: newest, Err: cause}
	if len(ids) > 0 {
		e.ID = ids[0]
		e.Time, _ = inboxdriver.IDTime(ids[0])
	}
	return e
}

// ErrNotPartitioned is returned by a store's partition methods when its
// Tables.Layout is not partitioned.
var ErrNotPartitioned = errors.New("the store's Tables.Layout is not partitioned")
