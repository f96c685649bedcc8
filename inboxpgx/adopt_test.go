package inboxpgx_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txinbox/inbox/inboxtype"
	"github.com/txinbox/inbox/internal/pgpartition"

	"github.com/jackc/pgx/v5"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/inboxtest"
)

// adoptFixture is a plain inbox, its effects, and the clients of both
// configurations over it: the old one (plain) and the new (partitioned).
type adoptFixture struct {
	plain, part   *inboxpgx.Driver
	plainC, partC *inbox.Client[pgx.Tx]
	schema        string
	effects       string
}

func newAdoptFixture(t *testing.T) *adoptFixture {
	t.Helper()
	plain, schema := newDriver(t, inboxdriver.Tables{})
	part, err := inboxpgx.New(plain.Pool(), &inboxpgx.Config{
		Tables:     inboxdriver.Tables{Schema: schema, Layout: inboxdriver.LayoutPartitioned},
		Partitions: inboxdriver.PartitionConfig{MaxSkew: testSkew},
	})
	require.NoError(t, err)
	f := &adoptFixture{plain: plain, part: part, schema: schema, effects: pgx.Identifier{schema, "adopt_effects"}.Sanitize()}
	// No key: a message applied twice leaves two rows.
	_, err = plain.Pool().Exec(context.Background(), `CREATE TABLE `+f.effects+` (consumer text NOT NULL, message_id text NOT NULL)`)
	require.NoError(t, err)
	cfg := &inbox.Config{ReplayHorizon: time.Hour, Retention: 2 * 24 * time.Hour}
	f.plainC, f.partC = newClient(t, plain, cfg), newClient(t, part, cfg)
	return f
}

func (f *adoptFixture) handler() inbox.Handler[pgx.Tx] {
	return inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, m inbox.Message) error {
		_, err := tx.Exec(ctx, `INSERT INTO `+f.effects+` (consumer, message_id) VALUES ('billing', $1)`, m.ID)
		return err
	})
}

func (f *adoptFixture) pipelined() inboxpgx.PipelineFunc {
	return func(ctx context.Context, m inbox.Message, b *pgx.Batch) error {
		b.Queue(`INSERT INTO `+f.effects+` (consumer, message_id) VALUES ('billing', $1)`, m.ID)
		return nil
	}
}

// applied counts the times each id was applied.
func (f *adoptFixture) applied(t *testing.T) map[string]int {
	t.Helper()
	rows, err := f.plain.Pool().Query(context.Background(), `SELECT message_id, count(*) FROM `+f.effects+` GROUP BY message_id`)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		require.NoError(t, rows.Scan(&id, &n))
		out[id] = n
	}
	require.NoError(t, rows.Err())
	return out
}

// replay processes m with the i-th of the claim paths: the old client and
// the new, one by one, in batches (with a new id beside), pipelined, and
// inside a transaction of the caller's. It returns m's outcome, and the
// new id it claimed beside m, if any.
func (f *adoptFixture) replay(ctx context.Context, i int, m inbox.Message) (inbox.Outcome, string, error) {
	switch i % 6 {
	case 0:
		return outcome(f.plainC.Process(ctx, "billing", m, f.handler()))
	case 1:
		return outcome(f.partC.Process(ctx, "billing", m, f.handler()))
	case 2:
		return outcome(f.partC.Process(ctx, "billing", m, f.pipelined()))
	case 3, 4:
		c := f.partC
		if i%6 == 4 {
			c = f.plainC
		}
		fresh := inbox.Message{ID: inboxtest.NewID()}
		rs, err := c.ProcessBatch(ctx, "billing", []inbox.Message{fresh, m}, f.handler())
		if err != nil {
			return 0, "", err
		}
		if rs[0].Err != nil || rs[0].Outcome != inbox.Applied {
			return 0, "", fmt.Errorf("the new id %s beside %s: %v, %v", fresh.ID, m.ID, rs[0].Outcome, rs[0].Err)
		}
		return rs[1].Outcome, fresh.ID, rs[1].Err
	default:
		tx, err := f.plain.Pool().Begin(ctx)
		if err != nil {
			return 0, "", err
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		o, err := f.partC.ClaimTx(ctx, tx, "billing", m)
		if err != nil || o != inbox.Applied {
			return o, "", err
		}
		if err := f.handler().Handle(ctx, tx, m); err != nil {
			return 0, "", err
		}
		return o, "", tx.Commit(ctx)
	}
}

func outcome(o inbox.Outcome, err error) (inbox.Outcome, string, error) { return o, "", err }

// awaitCount waits until n reaches want.
func awaitCount(t *testing.T, n *atomic.Int64, want int64, what string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for n.Load() < want {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d of %d within 60s", what, n.Load(), want)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// A plain inbox is adopted into the partitioned layout while replays of
// the ids it holds run on every claim path, from clients of both
// configurations, and while a claim stays open across the first attempts
// of the switch: no id applies twice, before, during or after the switch.
func TestAdoptPlainInboxUnderReplays(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newAdoptFixture(t)
	pool := f.plain.Pool()

	// Ids applied on the plain inbox, of the last ten days.
	now := time.Now()
	old := make([]inbox.Message, 60)
	for i := range old {
		old[i] = inbox.Message{ID: inboxtest.NewIDAt(now.Add(-time.Duration(i) * 4 * time.Hour))}
		inboxtest.RequireApplied(t)(f.plainC.Process(ctx, "billing", old[i], f.handler()))
	}

	// A claim on the plain table stays open across the switch's first
	// attempts.
	straddle := inbox.Message{ID: inboxtest.NewID()}
	open, claimed, err := f.plain.BeginClaim(ctx, &inboxdriver.ClaimParams{Consumer: "billing", IDs: []string{straddle.ID}})
	require.NoError(t, err)
	require.Equal(t, []bool{true}, claimed)
	_, err = open.Exec(ctx, `INSERT INTO `+f.effects+` (consumer, message_id) VALUES ('billing', $1)`, straddle.ID)
	require.NoError(t, err)
	defer func() { _ = f.plain.Rollback(ctx, open) }()

	// Replayers, until stopped.
	var (
		replays atomic.Int64
		mu      sync.Mutex
		fresh   []string
		wrong   []string
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				m := old[(i*7+w)%len(old)]
				o, id, err := f.replay(ctx, i, m)
				mu.Lock()
				if id != "" {
					fresh = append(fresh, id)
				}
				if err != nil || o != inbox.Duplicate {
					wrong = append(wrong, fmt.Sprintf("path %d, %s: %v, %v", i%6, m.ID, o, err))
				}
				mu.Unlock()
				replays.Add(1)
			}
		}()
	}
	// A replay of the open claim's id waits for it, for as long as the test
	// takes to commit it: on a loaded machine the replays before the
	// switch take longer than the default lock timeout.
	waiter := newClient(t, f.part, &inbox.Config{ReplayHorizon: time.Hour, Retention: 2 * 24 * time.Hour, LockTimeout: 5 * time.Minute})
	straddled := make(chan error, 1)
	go func() {
		o, err := waiter.Process(ctx, "billing", straddle, f.handler())
		if err == nil && o != inbox.Duplicate {
			err = fmt.Errorf("outcome %v", o)
		}
		straddled <- err
	}()

	awaitCount(t, &replays, 60, "replays before the switch")
	type result struct {
		rep *inboxtype.PartitionAdoptReport
		err error
	}
	adopted := make(chan result, 1)
	go func() {
		rep, err := f.partC.Admin().PartitionAdopt(ctx, inboxtype.PartitionAdoptParams{LockTimeout: 50 * time.Millisecond, Attempts: 100})
		adopted <- result{rep, err}
	}()
	// The switch waits for the open claim: a rename is waiting for it.
	deadline := time.Now().Add(60 * time.Second)
	for {
		var waiting int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
 WHERE wait_event_type = 'Lock' AND query LIKE 'ALTER TABLE %RENAME TO%' AND query LIKE '%'||$1||'%'`, f.schema).Scan(&waiting))
		if waiting > 0 {
			break
		}
		select {
		case r := <-adopted:
			t.Fatalf("the switch ended while a claim was open on the plain table: %+v, %v", r.rep, r.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("no attempt at the switch waited for the open claim within 60s")
		}
		time.Sleep(2 * time.Millisecond)
	}
	require.NoError(t, f.plain.Commit(ctx, open))
	r := <-adopted
	require.NoError(t, r.err)
	require.True(t, r.rep.Switched)
	require.Equal(t, pgpartition.FrozenName("inbox"), r.rep.Frozen)
	require.NotEmpty(t, r.rep.Created)
	require.NoError(t, <-straddled)

	// More replays, now on the partitioned table.
	awaitCount(t, &replays, replays.Load()+120, "replays after the switch")
	close(stop)
	wg.Wait()
	require.Empty(t, wrong, "every replay is a duplicate")

	// Every id applied once: the old ones, the open claim's, and the new
	// ones claimed beside the replays, before and after the switch.
	applied := f.applied(t)
	for _, m := range append(old, straddle) {
		require.Equal(t, 1, applied[m.ID], "times %s applied", m.ID)
	}
	require.NotEmpty(t, fresh)
	for _, id := range fresh {
		require.Equal(t, 1, applied[id], "times %s applied", id)
	}
	require.Len(t, applied, len(old)+1+len(fresh))

	// The inbox is partitioned now, with the frozen table beside it.
	st, err := f.partC.Admin().Partitions(ctx)
	require.NoError(t, err)
	require.NotNil(t, st.Frozen)
	require.Equal(t, pgpartition.FrozenName("inbox"), st.Frozen.Name)
	require.True(t, st.Frozen.Consulted)
	require.True(t, st.Covers(st.Now.Add(-9*24*time.Hour)))
	// Adopting again does nothing.
	again, err := f.partC.Admin().PartitionAdopt(ctx, inboxtype.PartitionAdoptParams{})
	require.NoError(t, err)
	require.True(t, again.AlreadyAdopted)
	require.False(t, again.Switched)

	// Each path once more, after the switch, for each old id; then new
	// ids still apply, once.
	for i, m := range append(old, straddle) {
		o, _, err := f.replay(ctx, i, m)
		require.NoError(t, err)
		require.Equal(t, inbox.Duplicate, o, "replay of %s on path %d", m.ID, i%6)
	}
	next := inbox.Message{ID: inboxtest.NewID()}
	inboxtest.RequireApplied(t)(f.partC.Process(ctx, "billing", next, f.pipelined()))
	inboxtest.RequireDuplicate(t)(f.plainC.Process(ctx, "billing", next, f.handler()))
	applied = f.applied(t)
	for _, m := range append(old, straddle, next) {
		require.Equal(t, 1, applied[m.ID], "times %s applied", m.ID)
	}
}

// Maintenance keeps the frozen table while any of its ids falls inside
// the partitions, and retires it, with its trigger, once none does: a
// replay of its ids is then refused as expired, and never applied.
func TestAdoptedFrozenTableRetires(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newAdoptFixture(t)
	now := time.Now()
	old := inbox.Message{ID: inboxtest.NewIDAt(now.Add(-4 * 24 * time.Hour))}
	inboxtest.RequireApplied(t)(f.plainC.Process(ctx, "billing", old, f.handler()))
	_, err := f.plain.Pool().Exec(ctx, `INSERT INTO `+pgx.Identifier{f.schema, "inbox_effects"}.Sanitize()+
		` (consumer_name, message_id, step, state, started_at) VALUES ('billing', $1, 'charge', 'done', now())`, old.ID)
	require.NoError(t, err)

	dry, err := f.partC.Admin().PartitionAdopt(ctx, inboxtype.PartitionAdoptParams{DryRun: true})
	require.NoError(t, err)
	require.False(t, dry.Switched)
	_, err = f.partC.Admin().Partitions(ctx)
	require.ErrorContains(t, err, "adopt", "a dry run leaves the inbox plain")

	rep, err := f.partC.Admin().PartitionAdopt(ctx, inboxtype.PartitionAdoptParams{})
	require.NoError(t, err)
	require.True(t, rep.Switched)

	// A retention that keeps old's day keeps the frozen table.
	kept, err := f.partC.Admin().PartitionMaintain(ctx, inboxtype.PartitionMaintainParams{Drop: true, Retention: 10 * 24 * time.Hour})
	require.NoError(t, err)
	require.Nil(t, kept.Retired)
	inboxtest.RequireDuplicate(t)(f.partC.Process(ctx, "billing", old, f.handler()))

	// A dry run says it would retire it, and does not.
	plan, err := f.partC.Admin().PartitionMaintain(ctx, inboxtype.PartitionMaintainParams{Drop: true, DryRun: true})
	require.NoError(t, err)
	require.NotNil(t, plan.Retired)
	inboxtest.RequireDuplicate(t)(f.partC.Process(ctx, "billing", old, f.handler()))

	done, err := f.partC.Admin().PartitionMaintain(ctx, inboxtype.PartitionMaintainParams{Drop: true})
	require.NoError(t, err)
	require.NotNil(t, done.Retired)
	require.Equal(t, pgpartition.FrozenName("inbox"), done.Retired.Name)
	require.Nil(t, done.State.Frozen)
	var left int
	require.NoError(t, f.plain.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = $1 AND c.relname = $2`, f.schema, pgpartition.FrozenName("inbox")).Scan(&left))
	require.Equal(t, 0, left, "the frozen table is dropped")
	require.NoError(t, f.plain.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_trigger WHERE tgname = $1
   AND tgrelid IN (SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $2)`,
		pgpartition.FrozenCheckName("inbox"), f.schema).Scan(&left))
	require.Equal(t, 0, left, "the trigger is dropped, on the inbox and its partitions")
	require.NoError(t, f.plain.Pool().QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{f.schema, "inbox_effects"}.Sanitize()).Scan(&left))
	require.Equal(t, 0, left, "the effect-ledger entries of the frozen ids are deleted")

	// The replay is refused as expired, by both clients, and not applied.
	_, err = f.partC.Process(ctx, "billing", old, f.handler())
	require.ErrorIs(t, err, inbox.ErrIDExpired)
	_, err = f.plainC.Process(ctx, "billing", old, f.handler())
	require.ErrorIs(t, err, inbox.ErrIDExpired)
	require.Equal(t, 1, f.applied(t)[old.ID])
	// New ids apply, once.
	fresh := inbox.Message{ID: inboxtest.NewID()}
	inboxtest.RequireApplied(t)(f.partC.Process(ctx, "billing", fresh, f.handler()))
	inboxtest.RequireDuplicate(t)(f.partC.Process(ctx, "billing", fresh, f.pipelined()))
}
