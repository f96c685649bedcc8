package inboxtest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txinbox/inbox"
)

func testConcurrentDuplicates[TTx any](t *testing.T, x *suite[TTx]) {
	c := x.client(&inbox.Config{LockTimeout: -1, MaxConflictRetries: 50})
	h, cs := x.effect("billing")
	id := NewID()
	const n = 32
	start := make(chan struct{})
	var applied, duplicate atomic.Int32
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			out, err := c.Process(context.Background(), "billing", msg(id), h)
			switch {
			case err != nil:
				errs <- err
			case out == inbox.Applied:
				applied.Add(1)
			case out == inbox.Duplicate:
				duplicate.Add(1)
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent delivery failed: %v", err)
	}
	requireEqual(t, "applied", applied.Load(), 1)
	requireEqual(t, "duplicates", duplicate.Load(), n-1)
	requireEqual(t, "handler calls", len(cs.list()), 1)
	x.requireEffects("billing", id, 1)
}

func testDuplicateWaitsThenApplies[TTx any](t *testing.T, x *suite[TTx]) {
	// The first delivery claims and then rolls back; the
	// concurrent second must then claim and apply.
	c := x.client(&inbox.Config{LockTimeout: -1, MaxConflictRetries: 50})
	id := NewID()
	claimed := make(chan struct{})
	release := make(chan struct{})
	first := inbox.HandlerFunc[TTx](func(ctx context.Context, tx TTx, m inbox.Message) error {
		close(claimed)
		<-release
		return errBoom
	})
	firstErr := make(chan error, 1)
	go func() {
		_, err := c.Process(context.Background(), "billing", msg(id), first)
		firstErr <- err
	}()
	<-claimed
	h, cs := x.effect("billing")
	second := make(chan error, 1)
	var outcome inbox.Outcome
	go func() {
		var err error
		outcome, err = c.Process(context.Background(), "billing", msg(id), h)
		second <- err
	}()
	x.awaitWaitingClaim(t)
	close(release)
	requireErrorIs(t, <-firstErr, errBoom)
	if err := <-second; err != nil {
		t.Fatalf("second delivery: %v", err)
	}
	requireEqual(t, "second outcome", outcome, inbox.Applied)
	requireEqual(t, "handler calls", len(cs.list()), 1)
	x.requireEffects("billing", id, 1)
}

func testLockTimeout[TTx any](t *testing.T, x *suite[TTx]) {
	// A duplicate behind a long in-flight first delivery gives up
	// with a retryable error instead of blocking without limit.
	slow := x.client(&inbox.Config{LockTimeout: -1})
	impatient := x.client(&inbox.Config{LockTimeout: 50 * time.Millisecond, MaxConflictRetries: -1})
	id := NewID()
	claimed := make(chan struct{})
	release := make(chan struct{})
	first := inbox.HandlerFunc[TTx](func(ctx context.Context, tx TTx, m inbox.Message) error {
		close(claimed)
		<-release
		return x.s.Effect(ctx, tx, "billing", m.ID)
	})
	firstOut := make(chan error, 1)
	go func() {
		out, err := slow.Process(context.Background(), "billing", msg(id), first)
		if err == nil && out != inbox.Applied {
			err = fmt.Errorf("first delivery: %v", out)
		}
		firstOut <- err
	}()
	<-claimed
	h, cs := x.effect("billing")
	_, err := impatient.Process(context.Background(), "billing", msg(id), h)
	requireErrorIs(t, err, inbox.ErrLockTimeout)
	if !inbox.IsRetryable(err) {
		t.Fatalf("a lock timeout must be retryable: %v", err)
	}
	close(release)
	if err := <-firstOut; err != nil {
		t.Fatal(err)
	}
	RequireDuplicate(t)(impatient.Process(context.Background(), "billing", msg(id), h))
	requireEqual(t, "second handler calls", len(cs.list()), 0)
	x.requireEffects("billing", id, 1)
}
