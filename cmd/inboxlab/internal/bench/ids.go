package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
)

// idsAge is how old the rows are that the inboxes of the id comparison
// hold before it starts.
const idsAge = 24 * time.Hour

// runIDs compares producers' random UUIDv4 ids with time-ordered UUIDv7
// ids: the inbox row at the largest worker count, on an inbox that already
// holds Config.IDRows rows of the same kind.
//
// A random id lands on a random leaf of the primary key, a time-ordered one
// on the rightmost leaf. What that costs shows in the WAL: the first change
// to a page after a checkpoint writes the whole page to the WAL. So each
// measurement starts right after a CHECKPOINT, the same for both kinds, and
// the kinds alternate from round to round.
func (b *bench) runIDs(ctx context.Context, rng *rand.Rand) (*IDsResult, error) {
	type side struct {
		kind  idKind
		table string
		row   *row
		c     cell
		secs  float64
	}
	var sides []*side
	for _, kind := range []idKind{idV4, idV7} {
		name := "ids_" + kind.String()
		tables := inboxdriver.Tables{
			Schema:      b.schema,
			Inbox:       name,
			DeadLetters: name + "_dead_letters",
			Effects:     name + "_effects",
			Migrations:  name + "_migrations",
		}
		client, err := newInbox(ctx, b.admin, b.pool, tables)
		if err != nil {
			return nil, err
		}
		s := &side{kind: kind, table: b.table(tables.Inbox)}
		s.c.workers = b.maxW
		s.row = &row{name: "inbox-" + kind.String(), batch: 1, op: func(ctx context.Context, b *bench, w *worker) error {
			return process(ctx, client, b.pg.handler, w.next(b, 1)[0], inbox.Applied)
		}}
		b.logf("ids: filling %s with %d rows", s.table, b.cfg.IDRows)
		if kind == idV4 {
			err = fillRandom(ctx, b, s.table, b.cfg.IDRows, idsAge)
		} else {
			err = fillTimeOrdered(ctx, b.admin, s.table, b.cfg.IDRows, idsAge)
		}
		if err != nil {
			return nil, err
		}
		sides = append(sides, s)
	}
	n := b.maxW
	for _, s := range sides {
		if _, err := b.timed(ctx, s.row, n, s.kind, b.cfg.Warmup); err != nil {
			return nil, err
		}
	}
	_, cperr := b.admin.Exec(ctx, `CHECKPOINT`)
	checkpoint := cperr == nil
	if !checkpoint {
		b.logf("ids: CHECKPOINT failed, measuring without it: %v", cperr)
	}
	for round := range b.cfg.IDRounds {
		order := []*side{sides[0], sides[1]}
		if rng.IntN(2) == 1 {
			order[0], order[1] = order[1], order[0]
		}
		for _, s := range order {
			b.logf("ids: round %d of %d, %s", round+1, b.cfg.IDRounds, s.kind)
			if checkpoint {
				if _, err := b.admin.Exec(ctx, `CHECKPOINT`); err != nil {
					return nil, fmt.Errorf("checkpoint: %w", err)
				}
			}
			r, u, err := b.measured(ctx, s.row, n, s.kind, b.cfg.IDDuration)
			if err != nil {
				return nil, err
			}
			s.c.add(r, u)
			s.secs += r.elapsed.Seconds()
		}
	}
	res := &IDsResult{Rows: b.cfg.IDRows, Workers: n, Checkpoint: checkpoint}
	for _, s := range sides {
		f := IDFigures{Figures: Figures{
			MsgsPerS: round1(median(s.c.rates)),
			P50Ms:    ms(percentile(s.c.lat, 0.50)),
			P99Ms:    ms(percentile(s.c.lat, 0.99)),
			Msgs:     s.c.msgs,
			Seconds:  round2(s.secs),
		}}
		if len(s.c.wal) > 0 {
			f.WALBytesPerMsg = round1(max(slices.Min(s.c.wal), 0))
		}
		if s.c.serverOK {
			f.ServerCPUUsPerMsg = usPerMsg(s.c.server, s.c.msgs)
		}
		var err error
		if f.InboxBytesPerRow, err = b.bytesPerRow(ctx, s.table); err != nil {
			return nil, err
		}
		if s.kind == idV4 {
			res.V4 = f
		} else {
			res.V7 = f
		}
	}
	return res, nil
}

// fillRandom inserts rows inbox rows with random UUIDv4 ids, as an inbox
// fed by such producers holds them, and vacuums the table.
func fillRandom(ctx context.Context, b *bench, table string, rows int, age time.Duration) error {
	_, err := b.admin.Exec(ctx, `INSERT INTO `+table+` (consumer_name, message_id, processed_at)
SELECT $1, gen_random_uuid(), now() - $2::interval + i * interval '1 millisecond'
  FROM generate_series(1, $3::integer) AS i`, consumer, fmt.Sprintf("%d seconds", int64(age.Seconds())), rows)
	if err != nil {
		return fmt.Errorf("fill %s: %w", table, err)
	}
	if _, err := b.admin.Exec(ctx, `VACUUM ANALYZE `+table); err != nil {
		return fmt.Errorf("vacuum %s: %w", table, err)
	}
	return nil
}
