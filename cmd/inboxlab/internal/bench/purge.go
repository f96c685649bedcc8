package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxpgx"
)

// purgeAge is how old the expired rows are, and purgeWindow the window the
// purge deletes beyond: longer than the default replay horizon.
const (
	purgeAge    = 60 * 24 * time.Hour
	purgeWindow = 30 * 24 * time.Hour
)

// runPurge measures claims on an inbox while a purge deletes
// Config.PurgeRows expired rows from it, against the same claims without a
// purge, before and after it. The purge runs on a connection of its own,
// as a cleaner in another process would.
func (b *bench) runPurge(ctx context.Context) (*PurgeResult, error) {
	tables := inboxdriver.Tables{
		Schema:      b.schema,
		Inbox:       "purge_inbox",
		DeadLetters: "purge_dead_letters",
		Effects:     "purge_effects",
		Migrations:  "purge_migrations",
	}
	client, err := newInbox(ctx, b.admin, b.pool, tables)
	if err != nil {
		return nil, err
	}
	table := b.table(tables.Inbox)
	b.logf("purge: filling %s with %d expired rows", table, b.cfg.PurgeRows)
	if err := fillTimeOrdered(ctx, b.admin, table, b.cfg.PurgeRows, purgeAge); err != nil {
		return nil, err
	}
	ad, err := inboxpgx.New(b.admin, &inboxpgx.Config{Tables: tables})
	if err != nil {
		return nil, err
	}
	cleaner, err := inbox.NewClient(ad, &inbox.Config{PurgeBatchSize: b.cfg.PurgeBatchSize})
	if err != nil {
		return nil, err
	}
	claims := &row{name: "inbox", batch: 1, op: func(ctx context.Context, b *bench, w *worker) error {
		return process(ctx, client, b.pg.handler, w.next(b, 1)[0], inbox.Applied)
	}}
	n := b.maxW
	if _, err := b.timed(ctx, claims, n, idV7, b.cfg.Warmup); err != nil {
		return nil, err
	}
	b.logf("purge: claims without a purge, %v", b.cfg.PurgeBaseline)
	before, err := b.timed(ctx, claims, n, idV7, b.cfg.PurgeBaseline)
	if err != nil {
		return nil, err
	}
	b.logf("purge: claims during the purge")
	stop := make(chan struct{})
	var (
		purged  int64
		perr    error
		elapsed time.Duration
	)
	go func() {
		defer close(stop)
		pctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		defer cancel()
		start := time.Now()
		purged, perr = cleaner.Admin().Purge(pctx, inbox.PurgeParams{OlderThan: purgeWindow})
		elapsed = time.Since(start)
	}()
	during, err := b.drive(ctx, claims, n, idV7, stop)
	<-stop
	if err != nil {
		return nil, err
	}
	if perr != nil {
		return nil, fmt.Errorf("purge: %w", perr)
	}
	if purged != int64(b.cfg.PurgeRows) {
		return nil, fmt.Errorf("purge deleted %d rows, want %d", purged, b.cfg.PurgeRows)
	}
	b.logf("purge: claims after the purge, %v", b.cfg.PurgeBaseline)
	after, err := b.timed(ctx, claims, n, idV7, b.cfg.PurgeBaseline)
	if err != nil {
		return nil, err
	}
	without := join(before, after)
	res := &PurgeResult{
		Rows:          purged,
		BatchSize:     cleaner.Config().PurgeBatchSize,
		Rest:          cleaner.Config().PurgeRest,
		Workers:       n,
		PurgeS:        round2(elapsed.Seconds()),
		PurgeRowsPerS: round1(float64(purged) / elapsed.Seconds()),
		Without:       figures(without),
		During:        figures(during),
		Before:        figures(before),
		After:         figures(after),
	}
	if res.Without.P99Ms > 0 {
		res.P99Ratio = round2(res.During.P99Ms / res.Without.P99Ms)
	}
	if res.Without.MsgsPerS > 0 {
		res.RateRatio = round2(res.During.MsgsPerS / res.Without.MsgsPerS)
	}
	return res, nil
}

func figures(r run) Figures {
	return Figures{
		MsgsPerS: round1(r.rate()),
		P50Ms:    ms(percentile(r.lat, 0.50)),
		P99Ms:    ms(percentile(r.lat, 0.99)),
		Msgs:     r.msgs,
		Seconds:  round2(r.elapsed.Seconds()),
	}
}

// fillTimeOrdered inserts rows inbox rows for consumer with UUIDv7 ids,
// processed one millisecond apart from age ago, then vacuums the table as
// autovacuum would have long since done to rows that old. Ids in time order
// are appended to the primary key, which keeps the fill fast.
func fillTimeOrdered(ctx context.Context, q *pgxpool.Pool, table string, rows int, age time.Duration) error {
	// A UUIDv7 in SQL: the 48-bit Unix milliseconds in hex, the version
	// nibble 7, and the random rest of a UUIDv4 from its 16th character on.
	_, err := q.Exec(ctx, `INSERT INTO `+table+` (consumer_name, message_id, processed_at)
SELECT $1, (substr(h, 1, 8) || '-' || substr(h, 9, 4) || '-7' || substr(gen_random_uuid()::text, 16))::uuid, t
  FROM (SELECT lpad(to_hex(b.ms + i), 12, '0') AS h, b.t0 + i * interval '1 millisecond' AS t
          FROM (SELECT (extract(epoch FROM now() - $2::interval) * 1000)::bigint AS ms, now() - $2::interval AS t0) AS b,
               generate_series(1, $3::integer) AS i) AS s`, consumer, fmt.Sprintf("%d seconds", int64(age.Seconds())), rows)
	if err != nil {
		return fmt.Errorf("fill %s: %w", table, err)
	}
	if _, err := q.Exec(ctx, `VACUUM ANALYZE `+table); err != nil {
		return fmt.Errorf("vacuum %s: %w", table, err)
	}
	return nil
}
