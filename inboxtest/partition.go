package inboxtest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxtype"
	"github.com/txinbox/inbox/internal/uuid"
)

// NewIDAt returns a new time-ordered UUID (version 7) of time t, as a
// producer whose clock reads t mints an event id.
func NewIDAt(t time.Time) string { return uuid.V7(t) }

// partitioned reports whether the store under test keeps the inbox in the
// partitioned layout.
func (x *suite[TTx]) partitioned() bool {
	return x.s.Driver.Tables().Layout == inboxdriver.LayoutPartitioned
}

// maintain runs partition maintenance through c and fails the test on an
// error.
func maintain[TTx any](t *testing.T, c *inbox.Client[TTx], p inboxtype.PartitionMaintainParams) *inboxtype.PartitionMaintainReport {
	t.Helper()
	rep, err := c.Admin().PartitionMaintain(context.Background(), p)
	if err != nil {
		t.Fatalf("PartitionMaintain(%+v): %v", p, err)
	}
	if rep.Skipped {
		t.Fatalf("PartitionMaintain(%+v) skipped: no other maintainer runs in this test", p)
	}
	return rep
}

// deadLetterAsAnAdapterDoes dead-letters a message that failed with a
// permanent error, as every transport adapter does before it acks it, and
// returns the stored dead letter.
func (x *suite[TTx]) deadLetterAsAnAdapterDoes(t *testing.T, c *inbox.Client[TTx], consumer string, m inbox.Message, err error) *inboxtype.DeadLetter {
	t.Helper()
	if !inbox.IsPermanent(err) {
		t.Fatalf("want a permanent error, which adapters dead-letter at once, got %v", err)
	}
	ctx := context.Background()
	if err := c.DeadLetter(ctx, inbox.DeadLetterParams{Consumer: consumer, Message: m, Err: err, Attempts: 1}); err != nil {
		t.Fatalf("DeadLetter: %v", err)
	}
	list, lerr := c.Admin().DeadLetterList(ctx, inboxtype.DeadLetterListParams{Consumer: consumer, Limit: 100})
	if lerr != nil {
		t.Fatalf("DeadLetters: %v", lerr)
	}
	for _, d := range list {
		if strings.EqualFold(d.MessageID, m.ID) {
			return d
		}
	}
	t.Fatalf("no dead letter of %s among %d", m.ID, len(list))
	return nil
}

// partitionCases exercise a store whose inbox is partitioned by the ids'
// time (inboxdriver.LayoutPartitioned). The store is expected to have made
// its partitions with the default PartitionConfig.Backfill (30 days) and
// Premake (7 days), and a MaxSkew of at most a day.
func partitionCases[TTx any]() []testCase[TTx] {
	return []testCase[TTx]{
		{"PartitionedRefusesIDsNotTimeOrdered", testPartitionedRefusesIDsNotTimeOrdered[TTx]},
		{"PartitionedReplayBeyondRetentionIsExpired", testPartitionedReplayBeyondRetentionIsExpired[TTx]},
		{"PartitionedFutureID", testPartitionedFutureID[TTx]},
		{"PartitionedPurgeAcrossPartitions", testPartitionedPurgeAcrossPartitions[TTx]},
		{"PartitionMaintenance", testPartitionMaintenance[TTx]},
	}
}

// cleanerPartitioned is the Cleaner case on a partitioned inbox: the
// cleaner drops the days older than the retention, counted from the ids'
// time, not from when they were processed.
func (x *suite[TTx]) cleanerPartitioned(t *testing.T) {
	ctx := context.Background()
	c := x.client(&inbox.Config{ReplayHorizon: time.Hour, Retention: 2 * 24 * time.Hour, CleanerInterval: 10 * time.Millisecond})
	h, cs := x.effect("billing")
	old := msg(NewIDAt(time.Now().Add(-4 * 24 * time.Hour)))
	recent := msg(NewID())
	RequireApplied(t)(c.Process(ctx, "billing", old, h))
	RequireApplied(t)(c.Process(ctx, "billing", recent, h))
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Admin().RunCleaner(cctx) }()
	deadline := time.Now().Add(30 * time.Second)
	for x.rows(c, "billing") != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the cleaner did not drop the day of the old message within 30s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	_, err := c.Process(ctx, "billing", old, h)
	requireErrorIs(t, err, inbox.ErrIDExpired)
	RequireDuplicate(t)(c.Process(ctx, "billing", recent, h))
	requireEqual(t, "handler calls", len(cs.list()), 2)
	x.requireEffects("billing", old.ID, 1)
}

func testPartitionedRefusesIDsNotTimeOrdered[TTx any](t *testing.T, x *suite[TTx]) {
	counting := &countingDriver[TTx]{Driver: x.s.Driver}
	c, err := inbox.NewClient[TTx](counting, nil)
	if err != nil {
		t.Fatal(err)
	}
	h, cs := x.effect("billing")
	ctx := context.Background()
	v4 := uuid.V4()
	_, err = c.Process(ctx, "billing", msg(v4), h)
	requireErrorIs(t, err, inbox.ErrIDNotTimeOrdered)
	if !inbox.IsPermanent(err) {
		t.Fatalf("an id that is not time-ordered must be permanent: %v", err)
	}
	requireEqual(t, "dead-letter reason", inbox.DeadLetterReason(err), inbox.ReasonNotTimeOrdered)
	_, err = c.Key(func(m inbox.Message) (string, error) { return m.ID, nil }, msg(v4))
	requireErrorIs(t, err, inbox.ErrIDNotTimeOrdered)
	rs, err := c.ProcessBatch(ctx, "billing", []inbox.Message{msg(v4), msg(NewID())}, h)
	if err != nil {
		t.Fatal(err)
	}
	requireOutcomes(t, rs, inbox.ErrIDNotTimeOrdered, inbox.Applied)
	requireEqual(t, "store calls", counting.calls.Load(), int64(1)) // the batch's one good id
	requireEqual(t, "handler calls", len(cs.list()), 1)

	d := x.deadLetterAsAnAdapterDoes(t, x.client(nil), "billing", msg(v4), rs[0].Err)
	requireEqual(t, "stored reason", d.Reason, inbox.ReasonNotTimeOrdered)
}

func testPartitionedReplayBeyondRetentionIsExpired[TTx any](t *testing.T, x *suite[TTx]) {
	ctx := context.Background()
	c := x.client(&inbox.Config{ReplayHorizon: time.Hour, Retention: 2 * 24 * time.Hour})
	h, cs := x.effect("billing")
	now := time.Now()
	old := msg(NewIDAt(now.Add(-5 * 24 * time.Hour)))
	recent := msg(NewIDAt(now.Add(-time.Hour)))
	RequireApplied(t)(c.Process(ctx, "billing", old, h))
	RequireApplied(t)(c.Process(ctx, "billing", recent, h))
	RequireDuplicate(t)(c.Process(ctx, "billing", old, h))

	// A dry run drops nothing.
	rep := maintain(t, c, inboxtype.PartitionMaintainParams{Drop: true, DryRun: true})
	if len(rep.Dropped) == 0 {
		t.Fatalf("a dry run with a retention of 2 days plans no drop: %+v", rep)
	}
	RequireDuplicate(t)(c.Process(ctx, "billing", old, h))

	rep = maintain(t, c, inboxtype.PartitionMaintainParams{Drop: true})
	oldTime, _ := inboxdriver.IDTime(old.ID)
	dropped := false
	for _, p := range rep.Dropped {
		if !oldTime.Before(p.From) && oldTime.Before(p.To) {
			dropped = true
		}
		if p.To.After(rep.Now.Add(-2 * 24 * time.Hour)) {
			t.Fatalf("partition %s (%s to %s) dropped, although younger than the retention at %s", p.Name, p.From, p.To, rep.Now)
		}
	}
	if !dropped {
		t.Fatalf("the day of %s (%s) was not dropped: %+v", old.ID, oldTime, rep.Dropped)
	}

	// The replay is refused, permanently, and never applied.
	_, err := c.Process(ctx, "billing", old, h)
	requireErrorIs(t, err, inbox.ErrIDExpired)
	requireEqual(t, "dead-letter reason", inbox.DeadLetterReason(err), inbox.ReasonExpiredID)
	d := x.deadLetterAsAnAdapterDoes(t, c, "billing", old, err)
	requireEqual(t, "stored reason", d.Reason, inbox.ReasonExpiredID)
	rs, err := c.ProcessBatchOrdered(ctx, "billing", []inbox.Message{msg(NewID()), old, recent, msg(NewID())}, h)
	if err != nil {
		t.Fatal(err)
	}
	requireOutcomes(t, rs, inbox.Applied, inbox.ErrIDExpired, inbox.Duplicate, inbox.Applied)
	tx, err := x.s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.ClaimTx(ctx, tx, "billing", old)
	_ = x.s.Driver.Rollback(ctx, tx)
	requireErrorIs(t, err, inbox.ErrIDExpired)
	x.requireEffects("billing", old.ID, 1)
	x.requireEffects("billing", recent.ID, 1)
	requireEqual(t, "handler calls", len(cs.list()), 4)

	// A retention inside the replay horizon plus the clock skew
	// is refused.
	_, err = c.Admin().PartitionMaintain(ctx, inboxtype.PartitionMaintainParams{Drop: true, Retention: time.Hour})
	requireErrorIs(t, err, inbox.ErrWindowTooShort)
}

func testPartitionedFutureID[TTx any](t *testing.T, x *suite[TTx]) {
	ctx := context.Background()
	c := x.client(nil)
	h, cs := x.effect("billing")
	future := msg(NewIDAt(time.Now().Add(60 * 24 * time.Hour)))
	_, err := c.Process(ctx, "billing", future, h)
	requireErrorIs(t, err, inbox.ErrIDFuture)
	requireEqual(t, "dead-letter reason", inbox.DeadLetterReason(err), inbox.ReasonFutureID)
	rs, err := c.ProcessBatch(ctx, "billing", []inbox.Message{msg(NewID()), future, msg(NewIDAt(time.Now().Add(2 * 24 * time.Hour)))}, h)
	if err != nil {
		t.Fatal(err)
	}
	// Two days ahead is within the partitions made ahead.
	requireOutcomes(t, rs, inbox.Applied, inbox.ErrIDFuture, inbox.Applied)
	requireEqual(t, "handler calls", len(cs.list()), 2)
	x.requireEffects("billing", future.ID, 0)
}

func testPartitionedPurgeAcrossPartitions[TTx any](t *testing.T, x *suite[TTx]) {
	// The first row of each partition sits at the same place in
	// its table: a purge by tuple id would take the other too.
	now := time.Now()
	c := x.client(&inbox.Config{ReplayHorizon: time.Hour})
	ctx := context.Background()
	h, _ := x.effect("billing")
	a := msg(NewIDAt(now.Add(-3 * 24 * time.Hour)))
	RequireApplied(t)(c.Process(ctx, "billing", a, h))
	// processed_at is the database's clock: age a's row.
	if err := AgeRows(ctx, x.s.Driver, "billing", []string{a.ID}, 10*24*time.Hour); err != nil {
		t.Fatal(err)
	}
	b := msg(NewIDAt(now))
	RequireApplied(t)(c.Process(ctx, "billing", b, h))
	n, err := c.Admin().Purge(ctx, inbox.PurgeParams{OlderThan: 5 * 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	requireEqual(t, "purged", n, int64(1))
	RequireDuplicate(t)(c.Process(ctx, "billing", b, h))
	x.requireEffects("billing", b.ID, 1)
}

func testPartitionMaintenance[TTx any](t *testing.T, x *suite[TTx]) {
	ctx := context.Background()
	c := x.client(&inbox.Config{ReplayHorizon: time.Hour, Retention: 3 * 24 * time.Hour})
	st, err := c.Admin().Partitions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Covers(st.Now) || !st.Covers(st.Now.Add(-29*24*time.Hour)) || !st.Covers(st.Now.Add(6*24*time.Hour)) {
		t.Fatalf("the migrated partitions should cover 30 days back to 7 ahead of %s: %+v", st.Now, st.Partitions)
	}
	for i := 1; i < len(st.Partitions); i++ {
		if !st.Partitions[i].From.Equal(st.Partitions[i-1].To) {
			t.Fatalf("partitions %s and %s leave a gap", st.Partitions[i-1].Name, st.Partitions[i].Name)
		}
	}
	// Again: nothing to make.
	rep := maintain(t, c, inboxtype.PartitionMaintainParams{Premake: true})
	requireEqual(t, "partitions made again", len(rep.Created), 0)

	// One maintainer at a time.
	tables := x.s.Driver.Tables()
	key := "inbox-partitions:" + tables.Schema + "." + tables.Inbox
	var skipped *inboxtype.PartitionMaintainReport
	ran, err := x.s.Driver.WithLock(ctx, key, func(ctx context.Context) error {
		var err error
		skipped, err = c.Admin().PartitionMaintain(ctx, inboxtype.PartitionMaintainParams{Premake: true, Drop: true})
		return err
	})
	if err != nil || !ran {
		t.Fatalf("WithLock: ran %v, %v", ran, err)
	}
	requireEqual(t, "skipped while another holds the lock", skipped.Skipped, true)

	// Drop, then make again: a day dropped is never made again.
	rep = maintain(t, c, inboxtype.PartitionMaintainParams{Premake: true, Drop: true})
	if len(rep.Dropped) < 20 {
		t.Fatalf("dropped %d partitions, want the 26 or so older than 3 days", len(rep.Dropped))
	}
	requireEqual(t, "made while dropping", len(rep.Created), 0)
	oldest, _ := rep.State.Range()
	if oldest.Before(rep.Now.Add(-4*24*time.Hour)) || oldest.After(rep.Now.Add(-3*24*time.Hour)) {
		t.Fatalf("the oldest partition starts at %s; want the day of %s", oldest, rep.Now.Add(-3*24*time.Hour))
	}
	rep = maintain(t, c, inboxtype.PartitionMaintainParams{Premake: true})
	requireEqual(t, "partitions made after the drop", len(rep.Created), 0)
	after, _ := rep.State.Range()
	requireEqual(t, "oldest after making", after, oldest)

	// A client whose retention does not cover the replay horizon
	// plus the producers' clock skew is refused.
	skew := x.s.Driver.(inboxdriver.Partitioner).PartitionConfig().MaxSkew
	_, err = inbox.NewClient(x.s.Driver, &inbox.Config{ReplayHorizon: 24 * time.Hour, Retention: 24*time.Hour + skew/2})
	requireErrorIs(t, err, inbox.ErrWindowTooShort)
}
