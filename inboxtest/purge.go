package inboxtest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/txinbox/inbox"
)

func testPurgeWindowAndHorizon[TTx any](t *testing.T, x *suite[TTx]) {
	c := x.client(&inbox.Config{ReplayHorizon: 24 * time.Hour})
	h, _ := x.effect("billing")
	ctx := context.Background()
	var oldIDs, newIDs []string
	for range 5 {
		id := NewID()
		oldIDs = append(oldIDs, id)
		RequireApplied(t)(c.Process(ctx, "billing", msg(id), h))
	}
	x.age("billing", oldIDs, 10*24*time.Hour)
	for range 3 {
		id := NewID()
		newIDs = append(newIDs, id)
		RequireApplied(t)(c.Process(ctx, "billing", msg(id), h))
	}

	_, err := c.Admin().Purge(ctx, inbox.PurgeParams{OlderThan: 12 * time.Hour})
	requireErrorIs(t, err, inbox.ErrWindowTooShort)
	if !strings.Contains(err.Error(), "12h") || !strings.Contains(err.Error(), "1d") {
		t.Fatalf("the refusal should name the window and the horizon: %v", err)
	}

	n, err := c.Admin().Purge(ctx, inbox.PurgeParams{OlderThan: 5 * 24 * time.Hour, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	requireEqual(t, "dry-run count", n, int64(5))
	requireEqual(t, "rows after a dry run", x.rows(c, "billing"), int64(8))

	var progress []int64
	n, err = c.Admin().Purge(ctx, inbox.PurgeParams{OlderThan: 5 * 24 * time.Hour, BatchSize: 2,
		Progress: func(d int64) { progress = append(progress, d) }})
	if err != nil {
		t.Fatal(err)
	}
	requireEqual(t, "purged", n, int64(5))
	requireEqual(t, "batches", fmt.Sprint(progress), "[2 4 5]")
	requireEqual(t, "rows left", x.rows(c, "billing"), int64(3))
	for _, id := range newIDs {
		RequireDuplicate(t)(c.Process(ctx, "billing", msg(id), h))
	}
	// Past the window a replay looks new: that is why the horizon
	// guard exists.
	RequireApplied(t)(c.Process(ctx, "billing", msg(oldIDs[0]), h))
}

func testPurgeUsesTheStoresClock[TTx any](t *testing.T, x *suite[TTx]) {
	// A consumer host whose clock is 20 days slow stamps nothing
	// with it: a 14-day purge finds its rows new, and a redelivery
	// is still a duplicate.
	slow := time.Now().Add(-20 * 24 * time.Hour)
	c := x.client(&inbox.Config{Now: func() time.Time { return slow }})
	h, _ := x.effect("billing")
	ctx := context.Background()
	id := NewID()
	RequireApplied(t)(c.Process(ctx, "billing", msg(id), h))
	RequireApplied(t)(c.Process(ctx, "billing", msg(NewID()), h))
	n, err := c.Admin().Purge(ctx, inbox.PurgeParams{OlderThan: inbox.DefaultReplayHorizon})
	if err != nil {
		t.Fatal(err)
	}
	requireEqual(t, "rows purged", n, int64(0))
	RequireDuplicate(t)(c.Process(ctx, "billing", msg(id), h))
	// A host 20 days fast places no cutoff either.
	fast := time.Now().Add(20 * 24 * time.Hour)
	c = x.client(&inbox.Config{Now: func() time.Time { return fast }})
	n, err = c.Admin().Purge(ctx, inbox.PurgeParams{OlderThan: inbox.DefaultReplayHorizon, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	requireEqual(t, "rows a fast host would purge", n, int64(0))
	x.age("billing", []string{id}, 15*24*time.Hour)
	n, err = c.Admin().Purge(ctx, inbox.PurgeParams{OlderThan: inbox.DefaultReplayHorizon})
	if err != nil {
		t.Fatal(err)
	}
	requireEqual(t, "rows purged once 15 days old by the store's clock", n, int64(1))
	requireEqual(t, "rows left", x.rows(c, "billing"), int64(1))
}

func testPurgeByConsumer[TTx any](t *testing.T, x *suite[TTx]) {
	c := x.client(&inbox.Config{ReplayHorizon: time.Hour})
	ctx := context.Background()
	for _, consumer := range []string{"billing", "inventory"} {
		h, _ := x.effect(consumer)
		id := NewID()
		RequireApplied(t)(c.Process(ctx, consumer, msg(id), h))
		x.age(consumer, []string{id}, 48*time.Hour)
	}
	n, err := c.Admin().Purge(ctx, inbox.PurgeParams{OlderThan: 24 * time.Hour, Consumer: "inventory"})
	if err != nil {
		t.Fatal(err)
	}
	requireEqual(t, "purged", n, int64(1))
	requireEqual(t, "billing rows", x.rows(c, "billing"), int64(1))
	requireEqual(t, "inventory rows", x.rows(c, "inventory"), int64(0))
}

func testCleaner[TTx any](t *testing.T, x *suite[TTx]) {
	if x.partitioned() {
		x.cleanerPartitioned(t)
		return
	}
	c := x.client(&inbox.Config{ReplayHorizon: time.Hour, Retention: 24 * time.Hour,
		CleanerInterval: 10 * time.Millisecond})
	h, _ := x.effect("billing")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	old := NewID()
	RequireApplied(t)(c.Process(ctx, "billing", msg(old), h))
	x.age("billing", []string{old}, 48*time.Hour)
	RequireApplied(t)(c.Process(ctx, "billing", msg(NewID()), h))

	// While another process holds the cleaner's lock, this one
	// skips its turns.
	tables := x.s.Driver.Tables()
	key := "inbox-cleaner:" + tables.Schema + "." + tables.Inbox
	held := make(chan struct{})
	releaseLock := make(chan struct{})
	lockDone := make(chan error, 1)
	go func() {
		_, err := x.s.Driver.WithLock(ctx, key, func(ctx context.Context) error {
			close(held)
			<-releaseLock
			return nil
		})
		lockDone <- err
	}()
	<-held
	ran, err := x.s.Driver.WithLock(ctx, key, func(ctx context.Context) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	requireEqual(t, "second holder ran", ran, false)
	close(releaseLock)
	if err := <-lockDone; err != nil {
		t.Fatal(err)
	}

	done := make(chan error, 1)
	go func() { done <- c.Admin().RunCleaner(ctx) }()
	deadline := time.Now().Add(30 * time.Second)
	for x.rows(c, "billing") != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the cleaner did not purge the old row within 30s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func testForgetAllowsOneMoreApply[TTx any](t *testing.T, x *suite[TTx]) {
	c := x.client(nil)
	h, cs := x.effect("billing")
	ctx := context.Background()
	id := NewID()
	RequireApplied(t)(c.Process(ctx, "billing", msg(id), h))
	// A dry run counts the row, and deletes nothing.
	for range 2 {
		n, err := c.Admin().ForgetCount(ctx, "billing", strings.ToUpper(id))
		requireEqual(t, "forget count error", err, nil)
		requireEqual(t, "inbox rows to forget", n.InboxRows, int64(1))
	}
	RequireDuplicate(t)(c.Process(ctx, "billing", msg(id), h))
	if err := c.Admin().Forget(ctx, "billing", strings.ToUpper(id)); err != nil {
		t.Fatal(err)
	}
	RequireApplied(t)(c.Process(ctx, "billing", msg(id), h))
	RequireDuplicate(t)(c.Process(ctx, "billing", msg(id), h))
	requireEqual(t, "handler calls", len(cs.list()), 2)
	x.requireEffects("billing", id, 2)
	requireErrorIs(t, c.Admin().Forget(ctx, "billing", NewID()), inbox.ErrNotFound)
	requireErrorIs(t, c.Admin().Forget(ctx, "inventory", id), inbox.ErrNotFound)
	_, err := c.Admin().ForgetCount(ctx, "inventory", id)
	requireErrorIs(t, err, inbox.ErrNotFound)
}
