package inboxtest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxtype"
)

func testReplayMarkedDeadLetters[TTx any](t *testing.T, x *suite[TTx]) {
	c := x.client(nil)
	ctx := context.Background()
	id1, id2, id3 := NewID(), NewID(), NewID()
	d1, d2 := deadLetterToReplay(t, c, "billing", msg(id1)), deadLetterToReplay(t, c, "billing", msg(id2))
	dNoID := deadLetterToReplay(t, c, "billing", inbox.Message{Payload: []byte("?"), Source: inbox.Source{Transport: "sqs", Queue: "q", BrokerID: "m-1"}})
	dOther := deadLetterToReplay(t, c, "inventory", msg(id3))
	markOnce(t, c, d1, d2, dNoID)

	// A consumer's replay replays its own dead letters, not billing's.
	marked, err := c.Admin().DeadLetterReplay(ctx, inbox.DeadLetterReplayParams{ID: dOther})
	requireEqual(t, "mark inventory's", marked, int64(1))
	requireEqual(t, "mark inventory's error", err, nil)
	hOther, csOther := x.effect("inventory")
	rs, err := c.ProcessReplays(ctx, "inventory", hOther)
	requireEqual(t, "inventory replay error", err, nil)
	requireEqual(t, "inventory replays", len(rs), 1)
	requireEqual(t, "inventory outcome", rs[0].Outcome, inbox.Applied)
	requireEqual(t, "inventory handler calls", len(csOther.list()), 1)
	x.requireEffects("inventory", id3, 1)

	// id2 was applied meanwhile (a redelivery the producer sent
	// again): its replay is a Duplicate, and the handler does not run
	// for it.
	h, cs := x.effect("billing")
	RequireApplied(t)(c.Process(ctx, "billing", msg(id2), h))
	rs, err = c.ProcessReplays(ctx, "billing", h)
	requireEqual(t, "replay error", err, nil)
	requireEqual(t, "replays", len(rs), 2)
	got := map[string]inbox.Outcome{}
	for _, r := range rs {
		requireEqual(t, "replay result error", r.Err, nil)
		got[r.DeadLetter.MessageID] = r.Outcome
	}
	requireEqual(t, "outcome of "+id1, got[id1], inbox.Applied)
	requireEqual(t, "outcome of "+id2, got[id2], inbox.Duplicate)
	x.requireEffects("billing", id1, 1)
	x.requireEffects("billing", id2, 1)
	requireEqual(t, "handler calls", len(cs.list()), 2)
	for _, d := range []int64{d1, d2} {
		_, err := c.Admin().DeadLetterGet(ctx, d)
		requireErrorIs(t, err, inbox.ErrNotFound)
	}
	rs, err = c.ProcessReplays(ctx, "billing", h)
	requireEqual(t, "replay error", err, nil)
	requireEqual(t, "replays once they are done", len(rs), 0)

	x.replayFailingAgain(t, c, h)
}

// deadLetterToReplay dead-letters m for consumer after three attempts and
// returns the dead letter's id.
func deadLetterToReplay[TTx any](t *testing.T, c *inbox.Client[TTx], consumer string, m inbox.Message) int64 {
	t.Helper()
	ctx := context.Background()
	if err := c.DeadLetter(ctx, inbox.DeadLetterParams{Consumer: consumer, Message: m, Err: errBoom, Attempts: 3}); err != nil {
		t.Fatal(err)
	}
	list, err := c.Admin().DeadLetterList(ctx, inboxtype.DeadLetterListParams{Consumer: consumer, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range list {
		if d.MessageID == m.ID || m.ID == "" && d.MessageID == "" {
			return d.ID
		}
	}
	t.Fatalf("dead letter %q of %s not found", m.ID, consumer)
	return 0
}

// markOnce is the marking step of ReplayMarkedDeadLetters: d1 is
// marked once, a dead letter without an id or none at all is refused, and
// of two concurrent marks of d2 one marks it.
func markOnce[TTx any](t *testing.T, c *inbox.Client[TTx], d1, d2, dNoID int64) {
	ctx := context.Background()
	marked, err := c.Admin().DeadLetterReplay(ctx, inbox.DeadLetterReplayParams{ID: d1})
	requireEqual(t, "first mark", marked, int64(1))
	requireEqual(t, "first mark error", err, nil)
	marked, err = c.Admin().DeadLetterReplay(ctx, inbox.DeadLetterReplayParams{ID: d1})
	requireEqual(t, "second mark of the same", marked, int64(0))
	requireEqual(t, "second mark error", err, nil)
	_, err = c.Admin().DeadLetterReplay(ctx, inbox.DeadLetterReplayParams{ID: dNoID})
	requireErrorIs(t, err, inbox.ErrNoMessageID)
	_, err = c.Admin().DeadLetterReplay(ctx, inbox.DeadLetterReplayParams{ID: 1 << 40})
	requireErrorIs(t, err, inbox.ErrNotFound)

	// Two concurrent marks of one dead letter: one marks it.
	var wins atomic.Int32
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := c.Admin().DeadLetterReplay(ctx, inbox.DeadLetterReplayParams{ID: d2})
			if err != nil {
				t.Error(err)
			}
			if ok > 0 {
				wins.Add(1)
			}
		}()
	}
	wg.Wait()
	requireEqual(t, "concurrent marks that marked", wins.Load(), 1)
}

// replayFailingAgain is the last step of ReplayMarkedDeadLetters, once
// billing's marked dead letters are replayed: h is billing's handler.
func (x *suite[TTx]) replayFailingAgain(t *testing.T, c *inbox.Client[TTx], h inbox.Handler[TTx]) {
	ctx := context.Background()
	// A replay whose handler fails again: the dead letter stays, with
	// the error and one more attempt, and is no longer marked.
	id4 := NewID()
	d4 := deadLetterToReplay(t, c, "billing", msg(id4))
	n, err := c.Admin().DeadLetterReplay(ctx, inbox.DeadLetterReplayParams{Consumer: "billing"})
	requireEqual(t, "mark all error", err, nil)
	requireEqual(t, "marked of billing's (not the one without an id)", n, int64(1))
	errAgain := errors.New("still declined")
	failing := inbox.HandlerFunc[TTx](func(context.Context, TTx, inbox.Message) error { return errAgain })
	rs, err := c.ProcessReplays(ctx, "billing", failing)
	requireEqual(t, "replay error", err, nil)
	requireEqual(t, "replays", len(rs), 1)
	requireErrorIs(t, rs[0].Err, errAgain)
	d, err := c.Admin().DeadLetterGet(ctx, d4)
	if err != nil {
		t.Fatal(err)
	}
	requireEqual(t, "attempts after the failed replay", d.Attempts, 4)
	if !strings.Contains(d.Error, "still declined") {
		t.Fatalf("the dead letter's error is %q, want the replay's", d.Error)
	}
	rs, err = c.ProcessReplays(ctx, "billing", failing)
	requireEqual(t, "replay error", err, nil)
	requireEqual(t, "replays of an unmarked dead letter", len(rs), 0)
	marked, err := c.Admin().DeadLetterReplay(ctx, inbox.DeadLetterReplayParams{ID: d4})
	requireEqual(t, "mark again", marked, int64(1))
	requireEqual(t, "mark again error", err, nil)
	rs, err = c.ProcessReplays(ctx, "billing", h)
	requireEqual(t, "replay error", err, nil)
	requireEqual(t, "replays", len(rs), 1)
	requireEqual(t, "outcome", rs[0].Outcome, inbox.Applied)
	x.requireEffects("billing", id4, 1)
	_, err = c.ProcessReplays(ctx, "bill\x00ing", h)
	requireErrorIs(t, err, inbox.ErrInvalidConsumer)
}

func testReplayDryRunMarksNothing[TTx any](t *testing.T, x *suite[TTx]) {
	c := x.client(nil)
	ctx := context.Background()
	for _, m := range []inbox.Message{msg(NewID()), msg(NewID()), {Payload: []byte("?"), Source: inbox.Source{Transport: "sqs", Queue: "q", BrokerID: "m-1"}}} {
		if err := c.DeadLetter(ctx, inbox.DeadLetterParams{Consumer: "billing", Message: m, Err: errBoom, Attempts: 3}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.DeadLetter(ctx, inbox.DeadLetterParams{Consumer: "inventory", Message: msg(NewID()), Err: errBoom, Attempts: 1}); err != nil {
		t.Fatal(err)
	}
	list, err := c.Admin().DeadLetterList(ctx, inboxtype.DeadLetterListParams{Consumer: "billing", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	var one int64
	for _, d := range list {
		if d.MessageID != "" {
			one = d.ID
		}
	}
	// Counted as the mark would count: billing's with an id, not
	// the one without, nor inventory's; and nothing is marked.
	for range 2 {
		n, err := c.Admin().DeadLetterReplay(ctx, inbox.DeadLetterReplayParams{Consumer: "billing", DryRun: true})
		requireEqual(t, "dry run error", err, nil)
		requireEqual(t, "would mark", n, int64(2))
	}
	n, err := c.Admin().DeadLetterReplay(ctx, inbox.DeadLetterReplayParams{ID: one, DryRun: true})
	requireEqual(t, "dry run of one error", err, nil)
	requireEqual(t, "would mark one", n, int64(1))
	n, err = c.Admin().DeadLetterReplay(ctx, inbox.DeadLetterReplayParams{ID: one})
	requireEqual(t, "mark one error", err, nil)
	requireEqual(t, "marked one after its dry run", n, int64(1))
	n, err = c.Admin().DeadLetterReplay(ctx, inbox.DeadLetterReplayParams{Consumer: "billing", DryRun: true})
	requireEqual(t, "dry run error", err, nil)
	requireEqual(t, "would mark, with one marked", n, int64(1))
	n, err = c.Admin().DeadLetterReplay(ctx, inbox.DeadLetterReplayParams{Consumer: "billing"})
	requireEqual(t, "mark all error", err, nil)
	requireEqual(t, "marked all after the dry runs", n, int64(1))
	_, err = c.Admin().DeadLetterReplay(ctx, inbox.DeadLetterReplayParams{ID: 1 << 40, DryRun: true})
	requireErrorIs(t, err, inbox.ErrNotFound)
}

func testConcurrentReplays[TTx any](t *testing.T, x *suite[TTx]) {
	// Two replays of one marked dead letter race: the message is
	// applied once.
	c := x.client(&inbox.Config{LockTimeout: -1, MaxConflictRetries: 50})
	ctx := context.Background()
	id := NewID()
	if err := c.DeadLetter(ctx, inbox.DeadLetterParams{Consumer: "billing", Message: msg(id), Err: errBoom, Attempts: 3}); err != nil {
		t.Fatal(err)
	}
	n, err := c.Admin().DeadLetterReplay(ctx, inbox.DeadLetterReplayParams{Consumer: "billing"})
	requireEqual(t, "mark error", err, nil)
	requireEqual(t, "marked", n, int64(1))
	effect, cs := x.effect("billing")
	claimed := make(chan struct{})
	release := make(chan struct{})
	var first sync.Once
	h := inbox.HandlerFunc[TTx](func(ctx context.Context, tx TTx, m inbox.Message) error {
		first.Do(func() {
			close(claimed)
			<-release
		})
		return effect.Handle(ctx, tx, m)
	})
	type replay struct {
		rs  []inbox.ReplayResult
		err error
	}
	done := make(chan replay, 2)
	go func() {
		rs, err := c.ProcessReplays(ctx, "billing", h)
		done <- replay{rs, err}
	}()
	<-claimed // the first replay holds the claim, uncommitted
	go func() {
		rs, err := c.ProcessReplays(ctx, "billing", h)
		done <- replay{rs, err}
	}()
	x.awaitWaitingClaim(t)
	close(release)
	var applied, duplicate int
	for range 2 {
		r := <-done
		if r.err != nil {
			t.Fatalf("replay: %v", r.err)
		}
		for _, res := range r.rs {
			switch {
			case res.Err != nil:
				t.Fatalf("replay result: %v", res.Err)
			case res.Outcome == inbox.Applied:
				applied++
			case res.Outcome == inbox.Duplicate:
				duplicate++
			}
		}
	}
	requireEqual(t, "replays that applied", applied, 1)
	if x.s.WaitingClaims != nil {
		// The second replay waited behind the first's claim.
		requireEqual(t, "replays that found a duplicate", duplicate, 1)
	}
	requireEqual(t, "handler calls", len(cs.list()), 1)
	x.requireEffects("billing", id, 1)
	list, err := c.Admin().DeadLetterList(ctx, inboxtype.DeadLetterListParams{Consumer: "billing", Limit: 10})
	requireEqual(t, "list error", err, nil)
	requireEqual(t, "dead letters left", len(list), 0)
}
