package pgpartition

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxtype"
)

// Adopting a plain inbox into the partitioned layout, while consumers run.
//
// The new partitioned table is made beside the plain one, with its
// partitions, and with a BEFORE INSERT trigger that looks each new row up
// in the frozen table. Then one short transaction renames the plain table
// to the frozen name and the new one to the inbox's. The rename waits for
// the claims open on the plain table (they hold its lock until they end),
// so when it commits, every claim the plain table will ever hold has
// committed or rolled back, and from then on every claim, whichever
// client and configuration sent it, inserts into the partitioned table.
// Nothing inserts into the frozen table any more, so its lookup can only
// answer "already applied", as the pipelined claim's lookup does; it is
// not check-then-insert.
//
// When the lookup finds the id, the trigger inserts the same row first,
// and lets the claim's own insert go on: that insert then meets the row,
// and behaves as on any duplicate. INSERT … ON CONFLICT DO NOTHING
// RETURNING returns nothing (a duplicate), a plain INSERT (the pipelined
// claim) fails with a unique violation (a duplicate), and the copy rolls
// back with the claim's transaction. So no claim statement changes. The
// trigger runs after routing: an id no partition takes is refused as
// expired or future first, and is never applied either.
//
// Caveat: a claim whose transaction took its snapshot before the switch
// (REPEATABLE READ or SERIALIZABLE, in a transaction that ran statements
// before its claim) does not see a plain-table claim that committed after
// that snapshot. Claims that are their transaction's first statement, and
// READ COMMITTED ones, do.

// adoptKinds are the relkinds of the inbox and of the adoption's tables,
// "" for none.
type adoptKinds struct{ inbox, frozen, adopting string }

func (m *Maintainer) adoptKinds(ctx context.Context) (adoptKinds, error) {
	var k adoptKinds
	q := func(name string) any { return m.qualify(name) }
	err := m.db.Query(ctx, `SELECT coalesce((SELECT relkind::text FROM pg_class WHERE oid = to_regclass($1)), ''),
       coalesce((SELECT relkind::text FROM pg_class WHERE oid = to_regclass($2)), ''),
       coalesce((SELECT relkind::text FROM pg_class WHERE oid = to_regclass($3)), '')`,
		[]any{m.parent, q(FrozenName(m.t.Inbox)), q(AdoptingName(m.t.Inbox))},
		func(scan func(...any) error) error { return scan(&k.inbox, &k.frozen, &k.adopting) })
	return k, err
}

// Adopt moves a plain inbox to the partitioned layout (see the comment
// above), under the maintainers' lock.
func (m *Maintainer) Adopt(ctx context.Context, p *inboxtype.PartitionAdoptParams) (*inboxtype.PartitionAdoptReport, error) {
	params := p.WithDefaults()
	var rep *inboxtype.PartitionAdoptReport
	ran, err := m.db.WithLock(ctx, m.LockKey(), func(ctx context.Context) error {
		var err error
		rep, err = m.adopt(ctx, &params)
		return err
	})
	if err != nil {
		return rep, err
	}
	if !ran {
		return &inboxtype.PartitionAdoptReport{Skipped: true}, nil
	}
	return rep, nil
}

func (m *Maintainer) adopt(ctx context.Context, p *inboxtype.PartitionAdoptParams) (*inboxtype.PartitionAdoptReport, error) {
	frozen, adopting := FrozenName(m.t.Inbox), AdoptingName(m.t.Inbox)
	rep := &inboxtype.PartitionAdoptReport{Frozen: frozen}
	k, err := m.adoptKinds(ctx)
	if err != nil {
		return nil, err
	}
	switch {
	case k.inbox == "":
		return nil, &missingTableError{table: m.parent, op: "adopt: "}
	case k.inbox == "p" && k.frozen != "":
		rep.AlreadyAdopted = true
		rep.State, err = m.State(ctx)
		return rep, err
	case k.inbox == "p":
		return nil, fmt.Errorf("inbox: adopt: the inbox table %s is partitioned already, and no frozen plain table %s is beside it: there is nothing to adopt", m.parent, frozen)
	case k.inbox != "r":
		return nil, fmt.Errorf("inbox: adopt: %s is not a table (relkind %q)", m.parent, k.inbox)
	case k.frozen != "":
		return nil, fmt.Errorf("inbox: adopt: a table %s exists already beside the plain inbox %s: drop or rename it first", m.qualify(frozen), m.parent)
	case k.adopting != "" && k.adopting != "p":
		return nil, fmt.Errorf("inbox: adopt: %s exists and is not a partitioned table: drop or rename it first", m.qualify(adopting))
	}
	var version int
	if err := m.db.Query(ctx, `SELECT current_setting('server_version_num')::int`, nil,
		func(scan func(...any) error) error { return scan(&version) }); err != nil {
		return nil, err
	}
	if version < minServerVersion {
		return nil, fmt.Errorf("inbox: the partitioned inbox needs Postgres 14 or later, for DETACH PARTITION … CONCURRENTLY; the server is %d", version)
	}
	if p.Backfill > inboxdriver.MaxPartitionsPerRun*day {
		return nil, fmt.Errorf("inbox: adopt: a backfill of %v is longer than %d days", p.Backfill, inboxdriver.MaxPartitionsPerRun)
	}
	if p.DryRun {
		return rep, nil
	}

	// The new table, under a name of its own, with its partitions and the
	// trigger. A run stopped before the switch left some of it: each step
	// is idempotent, so it goes on from there.
	next := &Maintainer{db: m.db, t: m.t, cfg: m.cfg, parent: m.qualify(adopting)}
	next.cfg.Backfill = max(next.cfg.Backfill, p.Backfill)
	for _, stmt := range m.adoptDDL() {
		if err := m.db.Exec(ctx, stmt); err != nil {
			return rep, fmt.Errorf("inbox: adopt: make %s: %w", m.qualify(adopting), err)
		}
	}
	made, err := next.maintain(ctx, &inboxtype.PartitionMaintainParams{Premake: true})
	if err != nil {
		return rep, fmt.Errorf("inbox: adopt: make the partitions of %s: %w", m.qualify(adopting), err)
	}
	rep.Created = made.Created

	// The switch: short, and bounded by LockTimeout each time, since the
	// claims that arrive while it waits wait behind it.
	for rep.Attempts < p.Attempts {
		rep.Attempts++
		err = m.db.Tx(ctx, m.switchDDL(p.LockTimeout)...)
		if err == nil || !lockNotAvailable(err) {
			break
		}
		select {
		case <-ctx.Done():
			return rep, ctx.Err()
		case <-time.After(time.Second):
		}
	}
	if err != nil {
		attempts := fmt.Sprintf("%d attempts, each", rep.Attempts)
		if rep.Attempts == 1 {
			attempts = "1 attempt,"
		}
		return rep, fmt.Errorf("inbox: adopt: switch the tables (after %s waiting up to %s for the claims open on the plain table): %w", attempts, p.LockTimeout, err)
	}
	rep.Switched = true
	rep.State, err = m.State(ctx)
	return rep, err
}

// adoptDDL makes the partitioned table of an adoption, beside the plain
// inbox, with the trigger that consults the frozen table. The trigger's
// function names the tables as they will be named after the switch.
func (m *Maintainer) adoptDDL() []string {
	adopting := m.qualify(AdoptingName(m.t.Inbox))
	frozen := m.qualify(FrozenName(m.t.Inbox))
	check := FrozenCheckName(m.t.Inbox)
	return []string{
		`CREATE TABLE IF NOT EXISTS ` + adopting + ` (
    consumer_name text COLLATE "C" NOT NULL,
    message_id    uuid        NOT NULL,
    processed_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer_name, message_id)
) PARTITION BY RANGE (message_id)`,
		`CREATE INDEX IF NOT EXISTS ` + m.quote(inboxdriver.IndexName(AdoptingName(m.t.Inbox), inboxdriver.IndexInboxProcessedAt)) +
			` ON ` + adopting + ` USING brin (processed_at)`,
		// pg_trigger_depth() = 1: the trigger's own insert of the row
		// fires the trigger again, and must not look again.
		`CREATE OR REPLACE FUNCTION ` + m.qualify(check) + `() RETURNS trigger LANGUAGE plpgsql AS $inbox$
BEGIN
    IF pg_catalog.pg_trigger_depth() = 1 AND EXISTS (
        SELECT FROM ` + frozen + ` WHERE consumer_name = NEW.consumer_name AND message_id = NEW.message_id) THEN
        -- Claimed while the inbox was the plain table: insert the row, so
        -- that the claim meets it as a duplicate.
        INSERT INTO ` + m.parent + ` (consumer_name, message_id, processed_at)
        VALUES (NEW.consumer_name, NEW.message_id, NEW.processed_at)
        ON CONFLICT (consumer_name, message_id) DO NOTHING;
    END IF;
    RETURN NEW;
END
$inbox$`,
		`CREATE OR REPLACE TRIGGER ` + m.quote(check) + ` BEFORE INSERT ON ` + adopting +
			` FOR EACH ROW EXECUTE FUNCTION ` + m.qualify(check) + `()`,
	}
}

// switchDDL renames the plain inbox to the frozen name, and the adoption's
// table to the inbox's name, with their indexes, in one transaction.
func (m *Maintainer) switchDDL(lockTimeout time.Duration) []string {
	inbox, frozen, adopting := m.t.Inbox, FrozenName(m.t.Inbox), AdoptingName(m.t.Inbox)
	renameIndex := func(from, to, suffix string) string {
		return `ALTER INDEX IF EXISTS ` + m.qualify(inboxdriver.IndexName(from, suffix)) + ` RENAME TO ` + m.quote(inboxdriver.IndexName(to, suffix))
	}
	return []string{
		fmt.Sprintf(`SET LOCAL lock_timeout = '%dms'`, max(lockTimeout.Milliseconds(), 1)),
		`ALTER TABLE ` + m.parent + ` RENAME TO ` + m.quote(frozen),
		renameIndex(inbox, frozen, inboxdriver.IndexInboxProcessedAt),
		renameIndex(inbox, frozen, "pkey"),
		`ALTER TABLE ` + m.qualify(adopting) + ` RENAME TO ` + m.quote(inbox),
		renameIndex(adopting, inbox, inboxdriver.IndexInboxProcessedAt),
		renameIndex(adopting, inbox, "pkey"),
	}
}

func (m *Maintainer) quote(name string) string {
	return inboxdriver.Quote(inboxdriver.DialectPostgres, name)
}

// lockNotAvailable reports whether err is Postgres's lock_timeout
// (SQLSTATE 55P03).
func lockNotAvailable(err error) bool {
	var se interface{ SQLState() string }
	return errors.As(err, &se) && se.SQLState() == "55P03"
}

// frozenState reads the frozen plain table of an adopted inbox, or nil.
func (m *Maintainer) frozenState(ctx context.Context) (*inboxtype.FrozenInbox, error) {
	var f *inboxtype.FrozenInbox
	err := m.db.Query(ctx, `SELECT c.relname::text, c.reltuples::bigint, coalesce(pg_total_relation_size(c.oid), 0),
       EXISTS (SELECT FROM pg_trigger t WHERE t.tgrelid = to_regclass($2) AND t.tgname = $3)
  FROM pg_class c WHERE c.oid = to_regclass($1) AND c.relkind = 'r'`,
		[]any{m.qualify(FrozenName(m.t.Inbox)), m.parent, FrozenCheckName(m.t.Inbox)},
		func(scan func(...any) error) error {
			f = &inboxtype.FrozenInbox{}
			return scan(&f.Name, &f.Rows, &f.Bytes, &f.Consulted)
		})
	return f, err
}

// frozenAhead bounds, past the database's clock, the ids of the frozen
// table that retiring it looks for: ids of random UUIDs (not time-ordered)
// fall past it almost all, and are refused before any claim.
const frozenAhead = 10 * 365 * day

// frozenInUse reports whether the frozen table holds an id that a claim
// could still meet: one at or after from, the start of the oldest
// partition, and before now plus frozenAhead. It looks per consumer, down
// the primary key, with a loose scan of the consumers' names.
func (m *Maintainer) frozenInUse(ctx context.Context, from, now time.Time) (bool, error) {
	frozen := m.qualify(FrozenName(m.t.Inbox))
	var n int64
	err := m.db.Query(ctx, `WITH RECURSIVE c(name) AS (
    (SELECT consumer_name FROM `+frozen+` ORDER BY consumer_name LIMIT 1)
  UNION ALL
    SELECT (SELECT f.consumer_name FROM `+frozen+` f WHERE f.consumer_name > c.name ORDER BY f.consumer_name LIMIT 1)
      FROM c WHERE c.name IS NOT NULL
)
SELECT count(*) FROM c WHERE c.name IS NOT NULL AND EXISTS (
    SELECT FROM `+frozen+` f WHERE f.consumer_name = c.name AND f.message_id >= $1::uuid AND f.message_id < $2::uuid)`,
		[]any{inboxdriver.TimeBound(from), inboxdriver.TimeBound(now.Add(frozenAhead))},
		func(scan func(...any) error) error { return scan(&n) })
	return n > 0, err
}

// retireFrozen drops the frozen table of an adopted inbox once none of its
// ids could be claimed again, given the partitions attached: a replay of
// any of them is then refused as expired. The trigger goes first, under a
// short lock timeout, since it takes the inbox's lock; then nothing reads
// the frozen table, and dropping it stalls no claim.
func (m *Maintainer) retireFrozen(ctx context.Context, f *inboxtype.FrozenInbox, attached []inboxtype.Partition, now time.Time, dryRun bool) (bool, error) {
	if len(attached) > 0 {
		inUse, err := m.frozenInUse(ctx, attached[0].From, now)
		if err != nil || inUse {
			return false, err
		}
	}
	if dryRun {
		return true, nil
	}
	check := FrozenCheckName(m.t.Inbox)
	if f.Consulted {
		err := m.db.Tx(ctx, fmt.Sprintf(`SET LOCAL lock_timeout = '%dms'`, inboxtype.DefaultAdoptLockTimeout.Milliseconds()),
			`DROP TRIGGER IF EXISTS `+m.quote(check)+` ON `+m.parent)
		if err != nil {
			return false, fmt.Errorf("inbox: retire the frozen table %s: drop its trigger (the next run tries again): %w", f.Name, err)
		}
	}
	frozen := m.qualify(f.Name)
	effects := m.t.Qualify(inboxdriver.DialectPostgres, m.t.Effects)
	if err := m.db.Exec(ctx, `DELETE FROM `+effects+` AS e USING `+frozen+` AS f
 WHERE e.consumer_name = f.consumer_name AND e.message_id = f.message_id`); err != nil {
		return false, fmt.Errorf("inbox: retire the frozen table %s: delete its effect-ledger entries: %w", f.Name, err)
	}
	if err := m.db.Exec(ctx, `DROP TABLE `+frozen); err != nil {
		return false, fmt.Errorf("inbox: retire the frozen table %s: %w", f.Name, err)
	}
	if err := m.db.Exec(ctx, `DROP FUNCTION IF EXISTS `+m.qualify(check)+`()`); err != nil {
		return false, fmt.Errorf("inbox: retire the frozen table %s: drop the trigger's function: %w", f.Name, err)
	}
	return true, nil
}

// FrozenName is the name of the frozen plain table of inbox.
func FrozenName(inbox string) string { return inboxdriver.IndexName(inbox, "frozen") }

// AdoptingName is the name of the partitioned table that an adoption
// makes beside the plain inbox, before the switch.
func AdoptingName(inbox string) string { return inboxdriver.IndexName(inbox, "adopting") }

// FrozenCheckName is the name of the trigger, and of its function, that
// looks a new row of the inbox up in its frozen table.
func FrozenCheckName(inbox string) string { return inboxdriver.IndexName(inbox, "frozen_check") }
