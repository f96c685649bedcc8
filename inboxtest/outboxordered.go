package inboxtest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/outbox"
)

func testOutboxOrderedKeepsEachKeysOrderAndBlocksOnlyTheFailingKey[TTx any](t *testing.T, x *suite[TTx]) {
	ctx := context.Background()
	o := x.outbox(&outbox.Config{Ordered: true})
	keys := []string{"a", "b", "c"}
	// Five transactions, each enqueueing the next event of every
	// key, and one unordered event.
	for i := 1; i <= 5; i++ {
		tx := x.begin()
		var msgs []outbox.Message
		for _, k := range keys {
			msgs = append(msgs, outbox.Message{Topic: "orders", Key: []byte(k), Payload: []byte(k + strconv.Itoa(i))})
		}
		msgs = append(msgs, outbox.Message{Topic: "orders", Payload: []byte("free" + strconv.Itoa(i))})
		_, err := o.EnqueueTx(ctx, tx, msgs...)
		requireNoError(t, "EnqueueTx", err)
		requireNoError(t, "commit", x.s.Driver.Commit(ctx, tx))
	}
	// b2 is rejected until the broker is fixed.
	var mu sync.Mutex
	fixed := false
	sink := &outbox.MemorySink{Reject: func(r outbox.Record) error {
		mu.Lock()
		defer mu.Unlock()
		if string(r.Payload) == "b2" && !fixed {
			return errors.New("INVALID_RECORD")
		}
		return nil
	}}
	clock := time.Now()
	var clockMu sync.Mutex
	now := func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return clock }
	r := x.relay(o, sink, &outbox.RelayConfig{Now: now, Backoff: func(int) time.Duration { return time.Hour }})
	for range 10 {
		if x.relayOnce(r).Claimed == 0 {
			break
		}
	}
	// Everything but b2..b5 is out; b is blocked behind b2 alone.
	x.requireOutbox(o, 4, 0)
	requireKeyOrder(t, sink.Records(), map[string]int{"a": 5, "b": 1, "c": 5})
	mu.Lock()
	fixed = true
	mu.Unlock()
	clockMu.Lock()
	clock = clock.Add(2 * time.Hour) // past b2's backoff
	clockMu.Unlock()
	for range 10 {
		if x.relayOnce(r).Claimed == 0 {
			break
		}
	}
	x.requireOutbox(o, 0, 0)
	requireKeyOrder(t, sink.Records(), map[string]int{"a": 5, "b": 5, "c": 5})
	requireEqual(t, "records", len(sink.Records()), 20)
}

func testOutboxOrderedRunGoesInOneCallToAnOrderKeepingSink[TTx any](t *testing.T, x *suite[TTx]) {
	// A sink that keeps a key's order within a call gets each
	// key's ready run in one call, up to a change of topic.
	o := x.outbox(&outbox.Config{Ordered: true})
	x.enqueueKeyed(o, map[string][]string{"a": {"t", "t", "t", "t", "t"}, "b": {"t", "t", "u", "u"}})
	sink := &outbox.MemorySink{}
	res := x.relayOnce(x.relay(o, sink, nil))
	requireEqual(t, "published", res.Published, 9)
	// a1..a5 and b1, b2 in the first call; b3, b4 (topic u) in
	// the second.
	requireEqual(t, "calls", sink.Calls(), 2)
	requireKeyOrder(t, sink.Records(), map[string]int{"a": 5, "b": 4})
	x.requireOutbox(o, 0, 0)
}

func testOutboxOrderedRunStopsAtItsFirstFailure[TTx any](t *testing.T, x *suite[TTx]) {
	// A run's rows after its first failure are not marked sent: the
	// rejected row waits out its backoff with the key behind it,
	// and a later round sends the rest in order, never a gap.
	ctx := context.Background()
	o := x.outbox(&outbox.Config{Ordered: true})
	ids := x.enqueueKeyed(o, map[string][]string{"a": {"t", "t", "t", "t", "t"}, "b": {"t", "t"}})
	var mu sync.Mutex
	fixed := false
	sink := &outbox.MemorySink{Reject: func(r outbox.Record) error {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case string(r.Key) == "a" && r.KeySeq == 3 && !fixed:
			return errors.New("INVALID_RECORD")
		case string(r.Key) == "b" && r.KeySeq == 1 && !fixed:
			return outbox.Unavailable(errors.New("connection refused"))
		}
		return nil
	}}
	clock := time.Now()
	var clockMu sync.Mutex
	now := func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return clock }
	r := x.relay(o, sink, &outbox.RelayConfig{Now: now, Backoff: func(int) time.Duration { return time.Hour }})
	res := x.relayOnce(r)
	requireEqual(t, "claimed", res.Claimed, 7)
	requireEqual(t, "published", res.Published, 2)
	requireEqual(t, "rejected", res.Rejected, 1)
	requireEqual(t, "unavailable", res.Unavailable, 1)
	requireKeyOrder(t, sink.Records(), map[string]int{"a": 2})
	for _, id := range ids["a"][3:] {
		row, err := x.outboxStore().OutboxGet(ctx, id)
		requireNoError(t, "OutboxGet", err)
		requireEqual(t, "attempts of a row after the failure", row.Attempts, 0)
	}
	row, err := x.outboxStore().OutboxGet(ctx, ids["a"][2])
	requireNoError(t, "OutboxGet", err)
	requireEqual(t, "attempts of the rejected row", row.Attempts, 1)
	// Within the backoff, b goes on and a waits.
	mu.Lock()
	fixed = true
	mu.Unlock()
	for range 10 {
		if x.relayOnce(r).Claimed == 0 {
			break
		}
	}
	requireKeyOrder(t, sink.Records(), map[string]int{"a": 2, "b": 2})
	x.requireOutbox(o, 3, 0)
	clockMu.Lock()
	clock = clock.Add(2 * time.Hour)
	clockMu.Unlock()
	calls := sink.Calls()
	res = x.relayOnce(r)
	requireEqual(t, "published after the backoff", res.Published, 3)
	requireEqual(t, "calls for a3..a5", sink.Calls()-calls, 1)
	requireKeyOrder(t, sink.Records(), map[string]int{"a": 5, "b": 2})
	x.requireOutbox(o, 0, 0)
}

func testOutboxOrderedSinkWithoutTheCapabilityGetsOneRecordPerKeyACall[TTx any](t *testing.T, x *suite[TTx]) {
	o := x.outbox(&outbox.Config{Ordered: true})
	x.enqueueKeyed(o, map[string][]string{"a": {"t", "t", "t", "t"}, "b": {"t", "t"}})
	mem := &outbox.MemorySink{}
	var mu sync.Mutex
	var most int // the most records of one key in one call
	sink := outbox.SinkFunc(func(ctx context.Context, recs []outbox.Record) []error {
		per := map[string]int{}
		mu.Lock()
		for _, r := range recs {
			per[string(r.Key)]++
			most = max(most, per[string(r.Key)])
		}
		mu.Unlock()
		return mem.Publish(ctx, recs)
	})
	res := x.relayOnce(x.relay(o, sink, nil))
	requireEqual(t, "published", res.Published, 6)
	requireEqual(t, "calls", mem.Calls(), 4)
	requireEqual(t, "most records of a key in a call", most, 1)
	requireKeyOrder(t, mem.Records(), map[string]int{"a": 4, "b": 2})
}

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
