package inboxpgx_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/inbox"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxmigrate"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/inboxtest"
	"github.com/txinbox/inbox/inboxtype"
	"github.com/txinbox/inbox/internal/testdb"
)

// partitionedTables are the tables of a partitioned inbox.
var partitionedTables = inboxdriver.Tables{Layout: inboxdriver.LayoutPartitioned}

// testSkew is the producers' clock skew the partitioned stores of the tests
// allow: short, so that the tests may keep a short retention.
const testSkew = time.Hour

// newPartitionedDriver returns a driver over a fresh schema migrated with
// the partitioned layout, whose partitions the migration made.
func newPartitionedDriver(t testing.TB) (*inboxpgx.Driver, string) {
	t.Helper()
	tables := partitionedTables
	tables.Schema = testdb.Schema(t)
	d, err := inboxpgx.New(testPool(t), &inboxpgx.Config{Tables: tables, Partitions: inboxdriver.PartitionConfig{MaxSkew: testSkew}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := inboxmigrate.New(d)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Up(context.Background()); err != nil {
		t.Fatal(err)
	}
	return d, tables.Schema
}

// newPartitionedStore is newStore over a partitioned inbox.
func newPartitionedStore(t *testing.T) *inboxtest.Store[pgx.Tx] {
	d, schema := newPartitionedDriver(t)
	return storeOver(t, d, schema)
}

func TestConformancePartitioned(t *testing.T) {
	t.Run("pgx", func(t *testing.T) {
		inboxtest.ExercisePartitioned(t, newPartitionedStore)
		inboxtest.ExerciseEffects(t, newPartitionedStore)
	})
}

// partitionsOf lists d's partitions.
func partitionsOf(t *testing.T, d *inboxpgx.Driver) *inboxtype.PartitionState {
	t.Helper()
	st, err := d.Partitions(context.Background())
	require.NoError(t, err)
	return st
}

// partitionOf returns the partition of st that holds time at.
func partitionOf(t *testing.T, st *inboxtype.PartitionState, at time.Time) inboxtype.Partition {
	t.Helper()
	for _, p := range st.Partitions {
		if !at.Before(p.From) && at.Before(p.To) {
			return p
		}
	}
	t.Fatalf("no partition holds %s", at)
	return inboxtype.Partition{}
}

// awaitDetachPending waits until a detach of a partition of schema's
// inbox has done its first step: the partition is marked, and the detach
// now waits for the transactions that use the inbox.
func awaitDetachPending(t *testing.T, pool *pgxpool.Pool, schema string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_inherits
 WHERE inhparent = to_regclass($1) AND inhdetachpending`, pgx.Identifier{schema, "inbox"}.Sanitize()).Scan(&n))
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no partition of schema %s was being detached within 30s", schema)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

var noop = inbox.HandlerFunc[pgx.Tx](func(context.Context, pgx.Tx, inbox.Message) error { return nil })

// Maintenance never makes a claim wait: making partitions goes through
// behind an open claim, and dropping one waits for the open claim while
// new claims go through.
func TestPartitionMaintenanceDoesNotBlockClaims(t *testing.T) {
	t.Parallel()
	d, schema := newPartitionedDriver(t)
	ctx := context.Background()
	c := newClient(t, d, &inbox.Config{ReplayHorizon: time.Hour, Retention: 2 * 24 * time.Hour})
	old := inbox.Message{ID: inboxtest.NewIDAt(time.Now().Add(-5 * 24 * time.Hour))}
	inboxtest.RequireApplied(t)(c.Process(ctx, "billing", old, noop))

	// Take away the two newest partitions, so that there is some to make.
	st := partitionsOf(t, d)
	parent := pgx.Identifier{schema, "inbox"}.Sanitize()
	for _, p := range st.Partitions[len(st.Partitions)-2:] {
		_, err := d.Pool().Exec(ctx, `ALTER TABLE `+parent+` DETACH PARTITION `+pgx.Identifier{schema, p.Name}.Sanitize()+`;
DROP TABLE `+pgx.Identifier{schema, p.Name}.Sanitize())
		require.NoError(t, err)
	}

	// A claim stays open: its transaction holds the parent table.
	tx, claimed, err := d.BeginClaim(ctx, &inboxdriver.ClaimParams{Consumer: "billing", IDs: []string{inboxtest.NewID()}})
	require.NoError(t, err)
	require.True(t, claimed[0])
	defer func() { _ = d.Rollback(ctx, tx) }()

	type result struct {
		rep *inboxtype.PartitionMaintainReport
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := c.Admin().PartitionMaintain(ctx, inboxtype.PartitionMaintainParams{Premake: true, Drop: true})
		done <- result{rep, err}
	}()
	awaitDetachPending(t, d.Pool(), schema)
	// The partitions ahead were made first, behind the open claim.
	require.Len(t, partitionsOf(t, d).Partitions, len(st.Partitions), "the two taken away are made again before the drop waits")
	// The detach waits for the open claim; a new claim does not wait for
	// the detach. (A plain DROP or DETACH would make it wait, and time out
	// at the client's LockTimeout.)
	inboxtest.RequireApplied(t)(c.Process(ctx, "billing", inbox.Message{ID: inboxtest.NewID()}, noop))
	select {
	case r := <-done:
		t.Fatalf("the drop ended while a claim was open: %+v, %v", r.rep, r.err)
	default:
	}
	require.NoError(t, d.Commit(ctx, tx))
	r := <-done
	require.NoError(t, r.err)
	require.Len(t, r.rep.Created, 2)
	oldTime, _ := inboxdriver.IDTime(old.ID)
	var names []string
	for _, p := range r.rep.Dropped {
		names = append(names, p.Name)
	}
	require.Contains(t, names, partitionOf(t, st, oldTime).Name)
	_, err = c.Process(ctx, "billing", old, noop)
	require.ErrorIs(t, err, inbox.ErrIDExpired)
}

// A run stopped during a detach leaves the detach pending, or the table
// detached: the next run finishes the work. A detached table whose days
// have not expired is attached again, with its rows.
func TestPartitionMaintenanceFinishesInterruptedRuns(t *testing.T) {
	t.Parallel()
	d, schema := newPartitionedDriver(t)
	ctx := context.Background()
	pool := d.Pool()
	c := newClient(t, d, &inbox.Config{ReplayHorizon: time.Hour, Retention: 2 * 24 * time.Hour})
	st := partitionsOf(t, d)
	parent := pgx.Identifier{schema, "inbox"}.Sanitize()
	ident := func(p inboxtype.Partition) string { return pgx.Identifier{schema, p.Name}.Sanitize() }
	pending, detached := st.Partitions[0], st.Partitions[1]
	yesterday := partitionOf(t, st, st.Now.Add(-24*time.Hour))
	kept := inbox.Message{ID: inboxtest.NewIDAt(yesterday.From.Add(time.Hour))}
	inboxtest.RequireApplied(t)(c.Process(ctx, "billing", kept, noop))

	// A concurrent detach, cancelled on the server while it waits for an
	// open claim. (Cancelling its context would not do: pgx breaks off the
	// connection, and the server finishes the detach all the same.)
	tx, _, err := d.BeginClaim(ctx, &inboxdriver.ClaimParams{Consumer: "billing", IDs: []string{inboxtest.NewID()}})
	require.NoError(t, err)
	detach := `ALTER TABLE ` + parent + ` DETACH PARTITION ` + ident(pending) + ` CONCURRENTLY`
	detachErr := make(chan error, 1)
	go func() {
		_, err := pool.Exec(ctx, detach)
		detachErr <- err
	}()
	awaitDetachPending(t, pool, schema)
	var cancelled bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT bool_or(pg_cancel_backend(pid)) FROM pg_stat_activity WHERE query = $1`, detach).Scan(&cancelled))
	require.True(t, cancelled)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, <-detachErr, &pgErr)
	require.Equal(t, "57014", pgErr.Code, "query_canceled")
	require.NoError(t, d.Rollback(ctx, tx))
	// A plain detach of an expired day and of yesterday, as if their drop
	// had not run.
	for _, p := range []inboxtype.Partition{detached, yesterday} {
		_, err := pool.Exec(ctx, `ALTER TABLE `+parent+` DETACH PARTITION `+ident(p))
		require.NoError(t, err)
	}
	st = partitionsOf(t, d)
	require.True(t, st.Partitions[0].DetachPending, "%+v", st.Partitions[0])
	require.Len(t, st.Detached, 2)

	// Meanwhile yesterday has no partition: its messages wait, retryably.
	_, err = c.Process(ctx, "billing", inbox.Message{ID: inboxtest.NewIDAt(yesterday.From.Add(2 * time.Hour))}, noop)
	require.ErrorIs(t, err, inbox.ErrNoPartition)
	require.True(t, inbox.IsRetryable(err), "%v", err)
	require.False(t, inbox.IsPermanent(err), "%v", err)

	rep, err := c.Admin().PartitionMaintain(ctx, inboxtype.PartitionMaintainParams{Drop: true, Premake: true})
	require.NoError(t, err)
	require.Len(t, rep.Finalized, 1)
	require.Equal(t, pending.Name, rep.Finalized[0].Name)
	var dropped []string
	for _, p := range rep.Dropped {
		dropped = append(dropped, p.Name)
	}
	require.Contains(t, dropped, pending.Name)
	require.Contains(t, dropped, detached.Name)
	require.Len(t, rep.Reattached, 1)
	require.Equal(t, yesterday.Name, rep.Reattached[0].Name)
	require.Len(t, rep.State.Detached, 0)
	for _, p := range rep.State.Partitions {
		require.False(t, p.DetachPending, "%s", p.Name)
	}
	inboxtest.RequireDuplicate(t)(c.Process(ctx, "billing", kept, noop))
}

// The pipelined paths refuse an expired id as the others do.
func TestPartitionedPipelined(t *testing.T) {
	t.Parallel()
	d, schema := newPartitionedDriver(t)
	ctx := context.Background()
	f := &pipelineFixture{d: d, accounts: createAccounts(t, d.Pool(), schema, 1)}
	c := newClient(t, d, &inbox.Config{ReplayHorizon: time.Hour, Retention: 2 * 24 * time.Hour})
	old := credit(inboxtest.NewIDAt(time.Now().Add(-5*24*time.Hour)), 1)
	inboxtest.RequireApplied(t)(c.Process(ctx, "billing", old, f.credit()))
	_, err := c.Admin().PartitionMaintain(ctx, inboxtype.PartitionMaintainParams{Drop: true})
	require.NoError(t, err)

	_, err = c.Process(ctx, "billing", old, f.credit())
	require.ErrorIs(t, err, inbox.ErrIDExpired)
	require.True(t, inbox.IsPermanent(err))

	batch := inboxpgx.PipelineBatchFunc(func(ctx context.Context, msgs []inbox.Message, b *pgx.Batch) error {
		for _, m := range msgs {
			if err := f.credit()(ctx, m, b); err != nil {
				return err
			}
		}
		return nil
	})
	rs, err := c.ProcessBatch(ctx, "billing", []inbox.Message{credit(inboxtest.NewID(), 10), old, credit(inboxtest.NewID(), 100)}, batch)
	require.NoError(t, err)
	require.Equal(t, inbox.Applied, rs[0].Outcome, "%v", rs[0].Err)
	require.ErrorIs(t, rs[1].Err, inbox.ErrIDExpired)
	require.Equal(t, inbox.Applied, rs[2].Outcome, "%v", rs[2].Err)
	require.Equal(t, 111, f.balance(t))
}

// A store configured with a layout that its table does not have says so.
func TestPartitionedLayoutMismatch(t *testing.T) {
	t.Parallel()
	plain, schema := newDriver(t, inboxdriver.Tables{})
	_, err := plain.Partitions(context.Background())
	require.Error(t, err)
	d, err := inboxpgx.New(plain.Pool(), &inboxpgx.Config{Tables: inboxdriver.Tables{Schema: schema, Layout: inboxdriver.LayoutPartitioned}})
	require.NoError(t, err)
	_, err = d.Partitions(context.Background())
	require.ErrorContains(t, err, "not partitioned")
	_, err = inboxpgx.New(plain.Pool(), &inboxpgx.Config{Tables: inboxdriver.Tables{Layout: inboxdriver.LayoutPartitioned, Inbox: strings.Repeat("i", 60)}})
	require.ErrorContains(t, err, "too long")
	_, err = inboxpgx.New(plain.Pool(), &inboxpgx.Config{Partitions: inboxdriver.PartitionConfig{Premake: time.Hour, MaxSkew: 2 * time.Hour}})
	require.ErrorContains(t, err, "MaxSkew")
}

// ulidOf encodes 16 bytes as a ULID.
func ulidOf(b [16]byte) string {
	const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
	var out [26]byte
	var acc uint
	bits := 0
	i := 25
	for j := 15; j >= 0; j-- {
		acc |= uint(b[j]) << bits
		bits += 8
		for bits >= 5 {
			out[i] = crockford[acc&31]
			acc >>= 5
			bits -= 5
			i--
		}
	}
	out[0] = crockford[acc&31]
	return string(out[:])
}

// A ULID carries its time as a UUIDv7 does: on a partitioned inbox the
// client stores it as the UUID of its 128 bits.
func TestPartitionedULIDs(t *testing.T) {
	t.Parallel()
	d, _ := newPartitionedDriver(t)
	ctx := context.Background()
	c := newClient(t, d, &inbox.Config{IDFormat: inbox.IDFormatULID})
	var b [16]byte
	id := inboxtest.NewID() // the bits of a time-ordered id of now
	for i := range b {
		_, err := fmt.Sscanf(strings.ReplaceAll(id, "-", "")[2*i:2*i+2], "%02x", &b[i])
		require.NoError(t, err)
	}
	ulid := ulidOf(b)
	var seen []string
	h := inbox.HandlerFunc[pgx.Tx](func(_ context.Context, _ pgx.Tx, m inbox.Message) error {
		seen = append(seen, m.ID)
		return nil
	})
	inboxtest.RequireApplied(t)(c.Process(ctx, "billing", inbox.Message{ID: ulid}, h))
	require.Equal(t, []string{id}, seen, "the handler sees the stored form")
	inboxtest.RequireDuplicate(t)(c.Process(ctx, "billing", inbox.Message{ID: strings.ToLower(ulid)}, h))
	inboxtest.RequireDuplicate(t)(c.Process(ctx, "billing", inbox.Message{ID: id}, h))
	require.NoError(t, c.Admin().Forget(ctx, "billing", ulid))
	inboxtest.RequireApplied(t)(c.Process(ctx, "billing", inbox.Message{ID: ulid}, h))

	// The plain layout keeps refusing ULIDs in a uuid column.
	plain, _ := newDriver(t, inboxdriver.Tables{})
	_, err := inbox.NewClient(plain, &inbox.Config{IDFormat: inbox.IDFormatULID})
	require.ErrorContains(t, err, "IDFormat")
}

// TestPlainPurgeOfPartitionedInbox runs the plain layout's purge against a
// table that has become a partitioned inbox, as a process configured before
// an adoption would: its purge by ctid must not reach the partitions, where
// the same ctids name other days' rows.
func TestPlainPurgeOfPartitionedInbox(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, schema := newPartitionedDriver(t)
	c := newClient(t, d, nil)
	noop := inbox.HandlerFunc[pgx.Tx](func(context.Context, pgx.Tx, inbox.Message) error { return nil })
	// An old event, aged past the purge, and two new ones. Ageing the old
	// row writes its new version second in its day's partition, where the
	// second new event sits in today's: both at ctid (0,2).
	old := inboxtest.NewIDAt(time.Now().Add(-20 * 24 * time.Hour))
	recent := []string{inboxtest.NewID(), inboxtest.NewID()}
	for _, id := range append([]string{old}, recent...) {
		inboxtest.RequireApplied(t)(c.Process(ctx, "billing", inbox.Message{ID: id}, noop))
	}
	require.NoError(t, inboxtest.AgeRows(ctx, d, "billing", []string{old}, 40*24*time.Hour))
	ctidOf := func(id string) string {
		var ctid string
		require.NoError(t, d.Pool().QueryRow(ctx, `SELECT ctid::text FROM `+pgx.Identifier{schema, partitionedTables.WithDefaults().Inbox}.Sanitize()+`
 WHERE consumer_name = 'billing' AND message_id = $1`, id).Scan(&ctid))
		return ctid
	}
	require.Equal(t, ctidOf(old), ctidOf(recent[1]), "the two rows at the same place in their partitions")

	tables := partitionedTables
	tables.Schema, tables.Layout = schema, inboxdriver.LayoutPlain
	stale, err := inboxpgx.New(d.Pool(), &inboxpgx.Config{Tables: tables})
	require.NoError(t, err)
	n, err := newClient(t, stale, &inbox.Config{PurgeRest: -1}).Admin().Purge(ctx, inbox.PurgeParams{OlderThan: 30 * 24 * time.Hour})
	require.NoError(t, err)
	require.Zero(t, n)
	for _, id := range append([]string{old}, recent...) {
		inboxtest.RequireDuplicate(t)(c.Process(ctx, "billing", inbox.Message{ID: id}, noop))
	}

	// The partitioned layout's own purge deletes the old row only.
	n, err = newClient(t, d, &inbox.Config{PurgeRest: -1}).Admin().Purge(ctx, inbox.PurgeParams{OlderThan: 30 * 24 * time.Hour})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	for _, id := range recent {
		inboxtest.RequireDuplicate(t)(c.Process(ctx, "billing", inbox.Message{ID: id}, noop))
	}
}
