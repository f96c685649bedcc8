package inboxtest

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

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
	x.requireOutbox(4, 0)
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
	x.requireOutbox(0, 0)
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
	x.requireOutbox(0, 0)
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
	x.requireOutbox(3, 0)
	clockMu.Lock()
	clock = clock.Add(2 * time.Hour)
	clockMu.Unlock()
	calls := sink.Calls()
	res = x.relayOnce(r)
	requireEqual(t, "published after the backoff", res.Published, 3)
	requireEqual(t, "calls for a3..a5", sink.Calls()-calls, 1)
	requireKeyOrder(t, sink.Records(), map[string]int{"a": 5, "b": 2})
	x.requireOutbox(0, 0)
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

// requireKeyOrder checks that the records of each key in want arrived with
// sequence numbers 1, 2, … up to want[key], in that order, once each.
func requireKeyOrder(t *testing.T, recs []outbox.Record, want map[string]int) {
	t.Helper()
	next := map[string]int64{}
	for _, r := range recs {
		if r.KeySeq == 0 {
			continue
		}
		k := string(r.Key)
		requireEqual(t, "key-seq header of "+k, r.Headers[outbox.HeaderKeySeq], strconv.FormatInt(r.KeySeq, 10))
		if r.KeySeq != next[k]+1 {
			t.Fatalf("key %s: got sequence %d after %d", k, r.KeySeq, next[k])
		}
		next[k] = r.KeySeq
	}
	for k, n := range want {
		requireEqual(t, "events of key "+k, next[k], int64(n))
	}
}

// enqueueKeyed enqueues, for each key of topics, one ordered event per
// topic listed, in that order, each key's events one to a transaction, and
// returns each key's event ids in order.
func (x *suite[TTx]) enqueueKeyed(o *outbox.Outbox[TTx], topics map[string][]string) map[string][]string {
	x.t.Helper()
	ctx := context.Background()
	ids := map[string][]string{}
	for k, ts := range topics {
		for i, topic := range ts {
			tx := x.begin()
			got, err := o.EnqueueTx(ctx, tx, outbox.Message{Topic: topic, Key: []byte(k), Payload: []byte(k + strconv.Itoa(i+1))})
			requireNoError(x.t, "EnqueueTx", err)
			requireNoError(x.t, "commit", x.s.Driver.Commit(ctx, tx))
			ids[k] = append(ids[k], got...)
		}
	}
	return ids
}
