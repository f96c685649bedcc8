package inboxsql_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxsql/inboxpostgres"
	"github.com/txinbox/inbox/inboxtype"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxmigrate"
	"github.com/txinbox/inbox/inboxsql"
	"github.com/txinbox/inbox/inboxtest"
	"github.com/txinbox/inbox/internal/testdb"
)

// partitionedPostgres is the sql-postgres engine over an inbox in the
// partitioned layout, with a short allowed clock skew so that the tests
// may keep a short retention.
func partitionedPostgres() engine {
	var e engine
	for _, pg := range engines {
		if pg.name == "sql-postgres" {
			e = pg
		}
	}
	e.name = "sql-postgres-partitioned"
	e.open = func(t *testing.T) (*sql.DB, inboxdriver.Tables) {
		return postgresPool(t), inboxdriver.Tables{Schema: testdb.Schema(t), Layout: inboxdriver.LayoutPartitioned}
	}
	e.partitions = inboxdriver.PartitionConfig{MaxSkew: time.Hour}
	return e
}

func TestConformancePartitioned(t *testing.T) {
	e := partitionedPostgres()
	t.Run(e.name, func(t *testing.T) {
		inboxtest.ExercisePartitioned(t, e.newStore)
	})
}

// The partitioned layout is for Postgres only, over uuid ids.
func TestPartitionedLayoutNeedsPostgres(t *testing.T) {
	t.Parallel()
	for _, e := range engines {
		if e.dialect == inboxsql.Postgres {
			continue
		}
		t.Run(e.name, func(t *testing.T) {
			db, tables := e.open(t)
			tables.Layout = inboxdriver.LayoutPartitioned
			_, err := inboxsql.New(db, engineOf(e.dialect), &inboxsql.Config{Tables: tables})
			require.ErrorContains(t, err, "Postgres only")
		})
	}
	_, err := inboxmigrate.Render(inboxdriver.DialectPostgres, inboxdriver.Tables{Layout: inboxdriver.LayoutPartitioned, IDType: inboxdriver.IDTypeText}, inboxmigrate.FormatPlain)
	require.ErrorContains(t, err, "IDType")
}

// A plain inbox on database/sql's Postgres is adopted into the
// partitioned layout while replays of its ids run from clients of both
// configurations: none applies twice.
func TestAdoptPlainInboxUnderReplays(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var pg engine
	for _, e := range engines {
		if e.name == "sql-postgres" {
			pg = e
		}
	}
	plain, tables := pg.newDriver(t)
	db := plain.DB()
	tables.Layout = inboxdriver.LayoutPartitioned
	part, err := inboxsql.New(db, inboxpostgres.Engine, &inboxsql.Config{Tables: tables, Partitions: inboxdriver.PartitionConfig{MaxSkew: time.Hour}})
	require.NoError(t, err)
	effects := tables.Qualify(inboxdriver.DialectPostgres, "adopt_effects")
	_, err = db.ExecContext(ctx, `CREATE TABLE `+effects+` (message_id text NOT NULL)`)
	require.NoError(t, err)
	h := inbox.HandlerFunc[*sql.Tx](func(ctx context.Context, tx *sql.Tx, m inbox.Message) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO `+effects+` (message_id) VALUES ($1)`, m.ID)
		return err
	})
	cfg := &inbox.Config{ReplayHorizon: time.Hour, Retention: 2 * 24 * time.Hour}
	plainC, err := inbox.NewClient(plain, cfg)
	require.NoError(t, err)
	partC, err := inbox.NewClient(part, cfg)
	require.NoError(t, err)

	old := make([]inbox.Message, 30)
	for i := range old {
		old[i] = inbox.Message{ID: inboxtest.NewIDAt(time.Now().Add(-time.Duration(i) * 6 * time.Hour))}
		inboxtest.RequireApplied(t)(plainC.Process(ctx, "billing", old[i], h))
	}
	var replays atomic.Int64
	var mu sync.Mutex
	var wrong []string
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 3; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				m := old[(i*5+w)%len(old)]
				var o inbox.Outcome
				var err error
				switch i % 3 {
				case 0:
					o, err = plainC.Process(ctx, "billing", m, h)
				case 1:
					o, err = partC.Process(ctx, "billing", m, h)
				default:
					var rs []inbox.BatchResult
					if rs, err = partC.ProcessBatch(ctx, "billing", []inbox.Message{m}, h); err == nil {
						o, err = rs[0].Outcome, rs[0].Err
					}
				}
				if err != nil || o != inbox.Duplicate {
					mu.Lock()
					wrong = append(wrong, fmt.Sprintf("%s: %v, %v", m.ID, o, err))
					mu.Unlock()
				}
				replays.Add(1)
			}
		}()
	}
	await := func(want int64) {
		deadline := time.Now().Add(60 * time.Second)
		for replays.Load() < want {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d replays within 60s", replays.Load(), want)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	await(30)
	rep, err := partC.Admin().PartitionAdopt(ctx, inboxtype.PartitionAdoptParams{LockTimeout: 50 * time.Millisecond, Attempts: 100})
	require.NoError(t, err)
	require.True(t, rep.Switched)
	await(replays.Load() + 60)
	close(stop)
	wg.Wait()
	require.Empty(t, wrong, "every replay is a duplicate")

	var n, distinct int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*), count(DISTINCT message_id) FROM `+effects).Scan(&n, &distinct))
	require.Equal(t, len(old), n, "applied once each")
	require.Equal(t, len(old), distinct)
	st, err := partC.Admin().Partitions(ctx)
	require.NoError(t, err)
	require.NotNil(t, st.Frozen)
	fresh := inbox.Message{ID: inboxtest.NewID()}
	inboxtest.RequireApplied(t)(partC.Process(ctx, "billing", fresh, h))
	inboxtest.RequireDuplicate(t)(plainC.Process(ctx, "billing", fresh, h))
}

// TestPlainPurgeOfPartitionedInbox runs the plain layout's purge against a
// table that has become a partitioned inbox, as a process configured before
// an adoption would: its purge by ctid must not reach the partitions, where
// the same ctids name other days' rows.
func TestPlainPurgeOfPartitionedInbox(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, tables := partitionedPostgres().newDriver(t)
	c, err := inbox.NewClient(d, &inbox.Config{PurgeRest: -1})
	require.NoError(t, err)
	noop := inbox.HandlerFunc[*sql.Tx](func(context.Context, *sql.Tx, inbox.Message) error { return nil })
	// An old event, aged past the purge, and two new ones. Ageing the old
	// row writes its new version second in its day's partition, where the
	// second new event sits in today's: both at ctid (0,2).
	old := inboxtest.NewIDAt(time.Now().Add(-20 * 24 * time.Hour))
	recent := []string{inboxtest.NewID(), inboxtest.NewID()}
	for _, id := range append([]string{old}, recent...) {
		inboxtest.RequireApplied(t)(c.Process(ctx, "billing", inbox.Message{ID: id}, noop))
	}
	require.NoError(t, inboxtest.AgeRows(ctx, d, "billing", []string{old}, 40*24*time.Hour))
	inboxTable := tables.WithDefaults().Qualify(inboxdriver.DialectPostgres, tables.WithDefaults().Inbox)
	ctidOf := func(id string) string {
		var ctid string
		require.NoError(t, d.DB().QueryRowContext(ctx, `SELECT ctid::text FROM `+inboxTable+` WHERE consumer_name = 'billing' AND message_id = $1`, id).Scan(&ctid))
		return ctid
	}
	require.Equal(t, ctidOf(old), ctidOf(recent[1]), "the two rows at the same place in their partitions")

	tables.Layout = inboxdriver.LayoutPlain
	stale, err := inboxsql.New(d.DB(), engineOf(inboxsql.Postgres), &inboxsql.Config{Tables: tables})
	require.NoError(t, err)
	sc, err := inbox.NewClient(stale, &inbox.Config{PurgeRest: -1})
	require.NoError(t, err)
	n, err := sc.Admin().Purge(ctx, inbox.PurgeParams{OlderThan: 30 * 24 * time.Hour})
	require.NoError(t, err)
	require.Zero(t, n)
	for _, id := range append([]string{old}, recent...) {
		inboxtest.RequireDuplicate(t)(c.Process(ctx, "billing", inbox.Message{ID: id}, noop))
	}

	// The partitioned layout's own purge deletes the old row only.
	n, err = c.Admin().Purge(ctx, inbox.PurgeParams{OlderThan: 30 * 24 * time.Hour})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	for _, id := range recent {
		inboxtest.RequireDuplicate(t)(c.Process(ctx, "billing", inbox.Message{ID: id}, noop))
	}
}
