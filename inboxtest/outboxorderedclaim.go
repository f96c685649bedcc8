package inboxtest

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/outbox"
)

func testOutboxOrderedClaimCutsByPositionOrTakesWholeRuns[TTx any](t *testing.T, x *suite[TTx]) {
	// Without WholeRuns a claim takes the head of every ready key
	// and cuts the runs behind them by position; with it, whole
	// runs of few keys, the last cut to fit. Either way, a prefix
	// of each key.
	ctx := context.Background()
	o := x.outbox(&outbox.Config{Ordered: true})
	five := []string{"t", "t", "t", "t", "t"}
	x.enqueueKeyed(o, map[string][]string{"a": five, "b": five, "c": five})
	rows := x.claimOutbox("position", 6, false)
	requireEqual(t, "claimed by position", claimedRuns(t, rows), "a:1-2 b:1-2 c:1-2")
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	_, err := x.outboxStore().OutboxRelease(ctx, &inboxdriver.OutboxReleaseParams{IDs: ids, Token: "position", AvailableAt: time.Now()})
	requireNoError(t, "OutboxRelease", err)

	// Whole runs: one key's five and the next key's first two.
	whole := x.claimOutbox("whole", 7, true)
	got := strings.Fields(claimedRuns(t, whole))
	slices.SortFunc(got, func(a, b string) int { return cmp.Compare(a[2:], b[2:]) })
	if len(got) != 2 || got[0][2:] != "1-2" || got[1][2:] != "1-5" {
		t.Fatalf("claimed whole runs: %v, want one key's 1-5 and another's 1-2", got)
	}
	cut := got[0][:1]
	// The next claim takes the third key's run alone: the rest of
	// the cut key waits behind its claimed rows.
	rows = x.claimOutbox("third", 100, true)
	third := claimedRuns(t, rows)
	if len(third) != 5 || third[2:] != "1-5" || strings.Contains(strings.Join(got, " "), third[:1]+":") {
		t.Fatalf("the next claim took %q, want the third key's 1-5 (the first claim took %v)", third, got)
	}
	ids = ids[:0]
	for _, r := range whole {
		ids = append(ids, r.ID)
	}
	n, err := x.outboxStore().OutboxAck(ctx, &inboxdriver.OutboxAckParams{IDs: ids, Token: "whole"})
	requireNoError(t, "OutboxAck", err)
	requireEqual(t, "acked", n, int64(7))
	// Once they are published, the rest of the cut key.
	requireEqual(t, "claimed after the ack", claimedRuns(t, x.claimOutbox("rest", 100, true)), cut+":3-5")
}

func testOutboxOrderedWholeRunsLockOnlyTheKeysTaken[TTx any](t *testing.T, x *suite[TTx]) {
	// Two claims at once, each for one key's run: each locks only
	// the key it takes, so the other gets another key.
	ctx := context.Background()
	o := x.outbox(&outbox.Config{Ordered: true})
	keys := []string{"k0", "k1", "k2", "k3"}
	const perKey, run = 20, 4
	x.enqueueN(o, len(keys)*perKey, perKey, func(i int) outbox.Message {
		return outbox.Message{Topic: "t", Key: []byte(keys[i%len(keys)])}
	})
	next := map[string]int64{} // per key, the last sequence taken
	// Six rounds take at most 20 of a key's rows before the last
	// round, so at least two keys are always ready.
	for round := range 6 {
		start := make(chan struct{})
		var wg sync.WaitGroup
		got := make([][]*inboxdriver.OutboxRow, 2)
		errs := make([]error, 2)
		for i := range got {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				got[i], errs[i] = x.tryClaimOutbox(fmt.Sprintf("r%d-%d", round, i), run, true)
			}()
		}
		close(start)
		wg.Wait()
		var taken []string
		for i, rows := range got {
			requireNoError(t, "OutboxClaim", errs[i])
			if len(rows) != run {
				t.Fatalf("round %d: claim %d took %d rows, want one key's run of %d", round, i, len(rows), run)
			}
			k := string(rows[0].Key)
			for j, r := range rows {
				requireEqual(t, "key of a claim's rows", string(r.Key), k)
				requireEqual(t, "sequence of "+k, r.KeySeq, next[k]+int64(j)+1)
			}
			next[k] += run
			taken = append(taken, k)
			ids := make([]string, len(rows))
			for j, r := range rows {
				ids[j] = r.ID
			}
			n, err := x.outboxStore().OutboxAck(ctx, &inboxdriver.OutboxAckParams{IDs: ids, Token: fmt.Sprintf("r%d-%d", round, i)})
			requireNoError(t, "OutboxAck", err)
			requireEqual(t, "acked", n, int64(run))
		}
		if taken[0] == taken[1] {
			t.Fatalf("round %d: both claims took key %s", round, taken[0])
		}
	}
}

func testOutboxOrderedSequencesConcurrentProducers[TTx any](t *testing.T, x *suite[TTx]) {
	// Producers of one key in concurrent transactions get distinct,
	// gap-free sequence numbers.
	ctx := context.Background()
	o := x.outbox(&outbox.Config{Ordered: true})
	const producers, each = 4, 5
	var wg sync.WaitGroup
	errs := make(chan error, producers*each)
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				errs <- x.retryConflicts(func() error {
					tx, err := x.s.Begin(ctx)
					if err != nil {
						return err
					}
					_, err = o.EnqueueTx(ctx, tx, outbox.Message{Topic: "t", Key: []byte("k"), Payload: fmt.Appendf(nil, "%d-%d", p, i)})
					if err != nil {
						_ = x.s.Driver.Rollback(ctx, tx)
						return err
					}
					return x.s.Driver.Commit(ctx, tx)
				})
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		requireNoError(t, "enqueue", err)
	}
	sink := &outbox.MemorySink{}
	r := x.relay(o, sink, nil)
	for range producers * each {
		if x.relayOnce(r).Claimed == 0 {
			break
		}
	}
	requireKeyOrder(t, sink.Records(), map[string]int{"k": producers * each})
}

// claimOutbox claims at most limit rows with token, retrying conflicts.
func (x *suite[TTx]) claimOutbox(token string, limit int, wholeRuns bool) []*inboxdriver.OutboxRow {
	x.t.Helper()
	rows, err := x.tryClaimOutbox(token, limit, wholeRuns)
	requireNoError(x.t, "OutboxClaim", err)
	return rows
}

// tryClaimOutbox is claimOutbox, returning its error, for a goroutine.
func (x *suite[TTx]) tryClaimOutbox(token string, limit int, wholeRuns bool) ([]*inboxdriver.OutboxRow, error) {
	var rows []*inboxdriver.OutboxRow
	err := x.retryConflicts(func() error {
		now := time.Now()
		var err error
		rows, err = x.outboxStore().OutboxClaim(context.Background(), &inboxdriver.OutboxClaimParams{
			Token: token, Now: now, LeaseUntil: now.Add(time.Minute), Limit: limit, WholeRuns: wholeRuns,
		})
		return err
	})
	return rows, err
}

// claimedRuns describes the ordered rows of a claim, which must come
// grouped by key in sequence order, as each key's sequence numbers, "a:1-2
// b:1-2", keys sorted.
func claimedRuns(t *testing.T, rows []*inboxdriver.OutboxRow) string {
	t.Helper()
	type span struct{ first, last int64 }
	runs := map[string]*span{}
	var prev string
	for _, r := range rows {
		k := string(r.Key)
		s, seen := runs[k]
		switch {
		case !seen:
			runs[k] = &span{r.KeySeq, r.KeySeq}
		case k != prev || r.KeySeq != s.last+1:
			t.Fatalf("claim: key %s's sequence %d after %d, or not grouped by key", k, r.KeySeq, s.last)
		default:
			s.last = r.KeySeq
		}
		prev = k
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(runs)) {
		out = append(out, fmt.Sprintf("%s:%d-%d", k, runs[k].first, runs[k].last))
	}
	return strings.Join(out, " ")
}
