package inboxtest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/outbox"
)

// outboxCases exercise the outbox (package outbox) on a store that keeps
// one: the enqueue in the caller's transaction, and the relay's claims and
// write-backs. A store that does not implement inboxdriver.OutboxStore
// skips them.
func outboxCases[TTx any]() []testCase[TTx] {
	return []testCase[TTx]{
		{"OutboxEnqueueCommitsWithTheTransaction", func(t *testing.T, x *suite[TTx]) {
			ctx := context.Background()
			o := x.outbox(nil)
			msgs := []outbox.Message{
				{Topic: "orders", Key: []byte("acct-1"), Payload: []byte(`{"n":1}`), Headers: map[string]string{"traceparent": "00-abc"}},
				{Topic: "orders", Payload: []byte(`{"n":2}`)},
				{Topic: "audit", Key: []byte("acct-2")},
			}
			// Rolled back: nothing to publish.
			tx := x.begin()
			_, err := o.EnqueueTx(ctx, tx, msgs...)
			requireNoError(t, "EnqueueTx", err)
			requireNoError(t, "rollback", x.s.Driver.Rollback(ctx, tx))
			x.requireOutbox(0, 0)

			tx = x.begin()
			ids, err := o.EnqueueTx(ctx, tx, msgs...)
			requireNoError(t, "EnqueueTx", err)
			requireNoError(t, "commit", x.s.Driver.Commit(ctx, tx))
			requireEqual(t, "ids", len(ids), 3)
			for _, id := range ids {
				canon, err := inbox.IDFormatUUID.CanonicalID(id)
				requireNoError(t, "minted id", err)
				requireEqual(t, "minted id is canonical", canon, id)
				requireEqual(t, "minted id is a UUIDv7", id[14], byte('7'))
			}
			if ids[0] == ids[1] || ids[1] == ids[2] {
				t.Fatalf("minted ids repeat: %v", ids)
			}
			x.requireOutbox(3, 0)

			sink := &outbox.MemorySink{}
			res := x.relayOnce(x.relay(o, sink, nil))
			requireEqual(t, "published", res.Published, 3)
			x.requireOutbox(0, 0)
			recs := sink.Records()
			requireEqual(t, "records", len(recs), 3)
			byID := map[string]outbox.Record{}
			for _, r := range recs {
				byID[r.ID] = r
				requireEqual(t, "event-id header", r.Headers[outbox.HeaderEventID], r.ID)
			}
			r0 := byID[ids[0]]
			requireEqual(t, "topic", r0.Topic, "orders")
			requireEqual(t, "key", string(r0.Key), "acct-1")
			requireEqual(t, "payload", string(r0.Payload), `{"n":1}`)
			requireEqual(t, "header", r0.Headers["traceparent"], "00-abc")
			requireEqual(t, "no key", byID[ids[1]].Key == nil, true)
			requireEqual(t, "empty payload", len(byID[ids[2]].Payload), 0)
			// A second round finds nothing: each event went out once.
			res = x.relayOnce(x.relay(o, sink, nil))
			requireEqual(t, "claimed again", res.Claimed, 0)
			requireEqual(t, "publishes", sink.Confirmed(), 3)
		}},

		{"OutboxKeepsTheCallersIDAndRefusesBadMessages", func(t *testing.T, x *suite[TTx]) {
			ctx := context.Background()
			o := x.outbox(nil)
			own := NewID()
			ids, err := o.Enqueue(ctx, outbox.Message{ID: "{" + upper(own) + "}", Topic: "orders"})
			requireNoError(t, "Enqueue", err)
			requireEqual(t, "canonical id", ids[0], own)
			row, err := x.outboxStore().OutboxGet(ctx, own)
			requireNoError(t, "OutboxGet", err)
			requireEqual(t, "stored id", row.ID, own)

			bad := []struct {
				name string
				msgs []outbox.Message
				is   error
			}{
				{"no topic", []outbox.Message{{Payload: []byte("x")}}, outbox.ErrInvalidMessage},
				{"key too long", []outbox.Message{{Topic: "t", Key: make([]byte, inboxdriver.MaxOutboxKeyLen+1)}}, outbox.ErrInvalidMessage},
				{"own header", []outbox.Message{{Topic: "t", Headers: map[string]string{outbox.HeaderEventID: "x"}}}, outbox.ErrInvalidMessage},
				{"malformed id", []outbox.Message{{ID: "not-a-uuid", Topic: "t"}}, inbox.ErrMalformedID},
				{"same id twice", []outbox.Message{{ID: NewID(), Topic: "t"}, {Topic: "t"}}, nil},
			}
			bad[4].msgs[1].ID = bad[4].msgs[0].ID
			for _, b := range bad {
				tx := x.begin()
				_, err := o.EnqueueTx(ctx, tx, append([]outbox.Message{{Topic: "fine"}}, b.msgs...)...)
				if err == nil {
					t.Fatalf("%s: EnqueueTx: no error", b.name)
				}
				if b.is != nil {
					requireErrorIs(t, err, b.is)
				}
				requireNoError(t, "commit", x.s.Driver.Commit(ctx, tx))
			}
			// Nothing of a refused enqueue was written, not even its good
			// messages.
			x.requireOutbox(1, 0)
		}},

		{"OutboxHandlerOutputsCommitWithTheInboxRow", func(t *testing.T, x *suite[TTx]) {
			// Consume, transform, produce: the handler enqueues its output
			// in the transaction of its inbox row, so a redelivery, a
			// Duplicate, has nothing to send again.
			ctx := context.Background()
			c := x.client(nil)
			o := x.outbox(nil)
			h := inbox.HandlerFunc[TTx](func(ctx context.Context, tx TTx, m inbox.Message) error {
				_, err := o.EnqueueTx(ctx, tx, outbox.Message{Topic: "invoices", Key: []byte("acct-1"), Payload: m.Payload, CausationID: m.ID})
				return err
			})
			in := msg(NewID())
			out, err := c.Process(ctx, "billing", in, h)
			requireNoError(t, "Process", err)
			requireEqual(t, "outcome", out, inbox.Applied)
			out, err = c.Process(ctx, "billing", in, h)
			requireNoError(t, "Process again", err)
			requireEqual(t, "outcome of the redelivery", out, inbox.Duplicate)
			// A handler that fails takes its output with it.
			failing := inbox.HandlerFunc[TTx](func(ctx context.Context, tx TTx, m inbox.Message) error {
				if _, err := o.EnqueueTx(ctx, tx, outbox.Message{Topic: "invoices", CausationID: m.ID}); err != nil {
					return err
				}
				return errors.New("card declined")
			})
			if _, err := c.Process(ctx, "billing", msg(NewID()), failing); err == nil {
				t.Fatal("Process with a failing handler: no error")
			}
			x.requireOutbox(1, 0)
			sink := &outbox.MemorySink{}
			x.relayOnce(x.relay(o, sink, nil))
			recs := sink.Records()
			requireEqual(t, "records", len(recs), 1)
			requireEqual(t, "causation id", recs[0].Headers[outbox.HeaderCausationID], in.ID)
		}},

		{"OutboxManyRelaysPublishEachEventOnce", func(t *testing.T, x *suite[TTx]) {
			ctx := context.Background()
			o := x.outbox(nil)
			const n = 300
			want := x.enqueueN(o, n, 25, func(i int) outbox.Message {
				return outbox.Message{Topic: "orders", Payload: []byte(strconv.Itoa(i))}
			})
			sink := &countingSink{}
			var wg sync.WaitGroup
			errs := make(chan error, 4)
			for range 4 {
				r := x.relay(o, sink, &outbox.RelayConfig{BatchSize: 16})
				wg.Add(1)
				go func() {
					defer wg.Done()
					// Bounded: 4 relays need at most n/16+1 rounds between them.
					for range n {
						res, err := r.RelayOnce(ctx)
						if err != nil {
							errs <- err
							return
						}
						if res.Claimed == 0 {
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatalf("RelayOnce: %v", err)
			}
			x.requireOutbox(0, 0)
			got := sink.counts()
			requireEqual(t, "events published", len(got), n)
			for _, id := range want {
				requireEqual(t, "publishes of "+id, got[id], 1)
			}
		}},

		{"OutboxRunningRelaysPublishEachEventOnce", func(t *testing.T, x *suite[TTx]) {
			// Run, unlike RelayOnce, carries the delete of a full batch
			// with its next claim, where the store can: still each event
			// once, and none left once the relays stopped.
			o := x.outbox(nil)
			const n = 250
			want := x.enqueueN(o, n, 50, func(i int) outbox.Message {
				return outbox.Message{Topic: "orders", Payload: []byte(strconv.Itoa(i))}
			})
			sink := &countingSink{}
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			for range 2 {
				r := x.relay(o, sink, &outbox.RelayConfig{BatchSize: 20, Workers: 2, PollInterval: time.Millisecond})
				wg.Add(1)
				go func() {
					defer wg.Done()
					_ = r.Run(ctx)
				}()
			}
			deadline := time.Now().Add(time.Minute)
			for {
				if got := sink.counts(); len(got) == n {
					break
				}
				if time.Now().After(deadline) {
					cancel()
					wg.Wait()
					t.Fatalf("the relays published %d of %d events in a minute", len(sink.counts()), n)
				}
				time.Sleep(5 * time.Millisecond)
			}
			cancel()
			wg.Wait()
			x.requireOutbox(0, 0)
			got := sink.counts()
			for _, id := range want {
				requireEqual(t, "publishes of "+id, got[id], 1)
			}
		}},

		{"OutboxEnqueueBatchNeedsAQueueingStore", func(t *testing.T, x *suite[TTx]) {
			// EnqueueBatch queues on the store's batch type where the store
			// has one (inboxpgx: a *pgx.Batch) and says ErrNotQueueable
			// where it has none; it never writes anything itself.
			o := x.outbox(nil)
			_, queues := x.outboxStore().(inboxdriver.OutboxQueuer)
			_, err := o.EnqueueBatch(struct{}{}, outbox.Message{Topic: "orders"})
			if !queues {
				if !errors.Is(err, outbox.ErrNotQueueable) {
					t.Fatalf("EnqueueBatch on a store that cannot queue: got %v, want ErrNotQueueable", err)
				}
			} else if err == nil || errors.Is(err, outbox.ErrNotQueueable) {
				t.Fatalf("EnqueueBatch on a batch of the wrong type: got %v, want an error naming the type", err)
			}
			x.requireOutbox(0, 0)
		}},

		{"OutboxLapsedClaimIsPublishedAgainWithTheSameID", func(t *testing.T, x *suite[TTx]) {
			// A relay that dies after the broker confirmed and before the
			// delete: its claim lapses, another relay publishes the same
			// event id again, and the dead relay's write-back, fenced by
			// its token, touches nothing.
			ctx := context.Background()
			o := x.outbox(nil)
			ids, err := o.Enqueue(ctx, outbox.Message{Topic: "orders"}, outbox.Message{Topic: "orders"})
			requireNoError(t, "Enqueue", err)
			store := x.outboxStore()
			now := time.Now()
			claimed, err := store.OutboxClaim(ctx, &inboxdriver.OutboxClaimParams{Token: "dead-relay", Now: now, LeaseUntil: now.Add(time.Minute), Limit: 10})
			requireNoError(t, "OutboxClaim", err)
			requireEqual(t, "claimed", len(claimed), 2)
			// Within the lease, no one else takes them.
			sink := &outbox.MemorySink{}
			res := x.relayOnce(x.relay(o, sink, nil))
			requireEqual(t, "claimed within the lease", res.Claimed, 0)
			// After it, another relay does.
			later := x.relay(o, sink, &outbox.RelayConfig{Now: func() time.Time { return time.Now().Add(2 * time.Minute) }})
			res = x.relayOnce(later)
			requireEqual(t, "published after the lease", res.Published, 2)
			got := map[string]bool{}
			for _, r := range sink.Records() {
				got[r.Headers[outbox.HeaderEventID]] = true
			}
			requireEqual(t, "same id", got[ids[0]] && got[ids[1]], true)
			n, err := store.OutboxAck(ctx, &inboxdriver.OutboxAckParams{IDs: ids, Token: "dead-relay"})
			requireNoError(t, "OutboxAck", err)
			requireEqual(t, "rows the stale token touched", n, int64(0))
		}},

		{"OutboxRejectionsParkAfterTheBudget", func(t *testing.T, x *suite[TTx]) {
			ctx := context.Background()
			o := x.outbox(nil)
			ids, err := o.Enqueue(ctx, outbox.Message{Topic: "orders"}, outbox.Message{Topic: "too-big"}, outbox.Message{Topic: "orders"})
			requireNoError(t, "Enqueue", err)
			sink := &outbox.MemorySink{Reject: func(r outbox.Record) error {
				if r.Topic == "too-big" {
					return errors.New("MESSAGE_TOO_LARGE")
				}
				return nil
			}}
			r := x.relay(o, sink, &outbox.RelayConfig{MaxRejections: 3, Backoff: func(int) time.Duration { return 0 }})
			var parked int
			for i := range 3 {
				res := x.relayOnce(r)
				requireEqual(t, fmt.Sprintf("round %d rejected", i), res.Rejected, 1)
				parked += res.Parked
			}
			requireEqual(t, "parked", parked, 1)
			requireEqual(t, "published", sink.Confirmed(), 2)
			x.requireOutbox(0, 1)
			res := x.relayOnce(r)
			requireEqual(t, "a parked event is not claimed", res.Claimed, 0)
			row, err := x.outboxStore().OutboxGet(ctx, ids[1])
			requireNoError(t, "OutboxGet", err)
			requireEqual(t, "attempts", row.Attempts, 3)
			requireEqual(t, "last error", row.LastError, "MESSAGE_TOO_LARGE")
			requireEqual(t, "parked", row.ParkedAt.IsZero(), false)
			// Unparked, it gets a fresh budget.
			ok, err := x.outboxStore().OutboxSet(ctx, &inboxdriver.OutboxSetParams{ID: ids[1], Action: inboxdriver.OutboxUnpark, Now: time.Now()})
			requireNoError(t, "unpark", err)
			requireEqual(t, "unparked", ok, true)
			sink.Reject = nil // the broker's limit was raised
			res = x.relayOnce(r)
			requireEqual(t, "published after the unpark", res.Published, 1)
			x.requireOutbox(0, 0)
		}},

		{"OutboxUnreachableBrokerNeverParks", func(t *testing.T, x *suite[TTx]) {
			ctx := context.Background()
			o := x.outbox(nil)
			ids, err := o.Enqueue(ctx, outbox.Message{Topic: "orders"}, outbox.Message{Topic: "orders"})
			requireNoError(t, "Enqueue", err)
			down := errors.New("dial tcp 127.0.0.1:9092: connection refused")
			sink := &outbox.MemorySink{Reject: func(outbox.Record) error { return outbox.Unavailable(down) }}
			r := x.relay(o, sink, &outbox.RelayConfig{MaxRejections: 2})
			for i := range 10 {
				res := x.relayOnce(r)
				requireEqual(t, fmt.Sprintf("round %d unavailable", i), res.Unavailable, 2)
				requireEqual(t, "parked", res.Parked, 0)
				requireErrorIs(t, res.UnavailableErr, outbox.ErrUnavailable)
			}
			x.requireOutbox(2, 0)
			for _, id := range ids {
				row, err := x.outboxStore().OutboxGet(ctx, id)
				requireNoError(t, "OutboxGet", err)
				requireEqual(t, "attempts", row.Attempts, 0)
			}
			sink.Reject = nil
			requireEqual(t, "published once the broker is back", x.relayOnce(r).Published, 2)
		}},

		{"OutboxOrderedKeepsEachKeysOrderAndBlocksOnlyTheFailingKey", func(t *testing.T, x *suite[TTx]) {
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
		}},

		{"OutboxOrderedRunGoesInOneCallToAnOrderKeepingSink", func(t *testing.T, x *suite[TTx]) {
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
		}},

		{"OutboxOrderedRunStopsAtItsFirstFailure", func(t *testing.T, x *suite[TTx]) {
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
		}},

		{"OutboxOrderedSinkWithoutTheCapabilityGetsOneRecordPerKeyACall", func(t *testing.T, x *suite[TTx]) {
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
		}},

		{"OutboxOrderedClaimCutsByPositionOrTakesWholeRuns", func(t *testing.T, x *suite[TTx]) {
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
		}},

		{"OutboxOrderedWholeRunsLockOnlyTheKeysTaken", func(t *testing.T, x *suite[TTx]) {
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
		}},

		{"OutboxOrderedSequencesConcurrentProducers", func(t *testing.T, x *suite[TTx]) {
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
		}},

		{"OutboxStatsListAndOperatorActions", func(t *testing.T, x *suite[TTx]) {
			ctx := context.Background()
			created := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
			o := x.outbox(&outbox.Config{Now: func() time.Time { return created }})
			ids, err := o.Enqueue(ctx, outbox.Message{Topic: "a"}, outbox.Message{Topic: "b"}, outbox.Message{Topic: "c"})
			requireNoError(t, "Enqueue", err)
			store := x.outboxStore()
			st, err := x.client(nil).Admin().OutboxStats(ctx)
			requireNoError(t, "Client.OutboxStats", err)
			requireEqual(t, "pending", st.Pending, int64(3))
			requireEqual(t, "oldest pending", st.OldestPending.Equal(created), true)
			if st.Lag < time.Minute {
				t.Fatalf("lag %v, want at least a minute", st.Lag)
			}
			set := func(id string, a inboxdriver.OutboxAction, want bool) {
				t.Helper()
				ok, err := store.OutboxSet(ctx, &inboxdriver.OutboxSetParams{ID: id, Action: a, Now: time.Now()})
				requireNoError(t, string(a), err)
				requireEqual(t, string(a)+" found the row", ok, want)
			}
			set(ids[0], inboxdriver.OutboxParkRow, true)
			set(ids[0], inboxdriver.OutboxParkRow, false) // already parked
			set(ids[0], inboxdriver.OutboxRetryNow, false)
			set(ids[1], inboxdriver.OutboxRetryNow, true)
			set(ids[1], inboxdriver.OutboxUnpark, false) // not parked
			set(NewID(), inboxdriver.OutboxParkRow, false)
			x.requireOutbox(2, 1)
			parked, err := store.OutboxList(ctx, &inboxdriver.OutboxListParams{State: inboxdriver.OutboxParked, Limit: 10})
			requireNoError(t, "OutboxList", err)
			requireEqual(t, "parked rows", len(parked), 1)
			requireEqual(t, "parked row", parked[0].ID, ids[0])
			all, err := store.OutboxList(ctx, &inboxdriver.OutboxListParams{Limit: 10})
			requireNoError(t, "OutboxList", err)
			requireEqual(t, "rows", len(all), 3)
			if _, err := store.OutboxGet(ctx, NewID()); !errors.Is(err, inboxdriver.ErrNotFound) {
				t.Fatalf("OutboxGet of a missing row: %v, want ErrNotFound", err)
			}

			// Kept after publishing, then purged.
			r := x.relay(o, &outbox.MemorySink{}, &outbox.RelayConfig{KeepPublished: true})
			requireEqual(t, "published", x.relayOnce(r).Published, 2)
			st, err = x.client(nil).Admin().OutboxStats(ctx)
			requireNoError(t, "Stats", err)
			requireEqual(t, "stats", [3]int64{st.Pending, st.Parked, st.Published}, [3]int64{0, 1, 2})
			requireEqual(t, "no lag", st.Lag, time.Duration(0))
			pub, err := store.OutboxList(ctx, &inboxdriver.OutboxListParams{State: inboxdriver.OutboxPublished, Limit: 10})
			requireNoError(t, "OutboxList", err)
			requireEqual(t, "published rows", len(pub), 2)
			requireEqual(t, "published at", pub[0].PublishedAt.IsZero(), false)
			n, err := o.PurgePublished(ctx, time.Now().Add(time.Minute), 1)
			requireNoError(t, "PurgePublished", err)
			requireEqual(t, "purged", n, int64(2))
			x.requireOutbox(0, 1)
		}},
	}
}

// countingSink counts each event id's publishes.
type countingSink struct {
	mu sync.Mutex
	n  map[string]int
}

func (s *countingSink) Publish(_ context.Context, recs []outbox.Record) []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n == nil {
		s.n = map[string]int{}
	}
	for _, r := range recs {
		s.n[r.Headers[outbox.HeaderEventID]]++
	}
	return make([]error, len(recs))
}

func (s *countingSink) counts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.n))
	for k, v := range s.n {
		out[k] = v
	}
	return out
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

func (x *suite[TTx]) outboxStore() inboxdriver.OutboxStore[TTx] {
	x.t.Helper()
	s, ok := x.s.Driver.(inboxdriver.OutboxStore[TTx])
	if !ok {
		x.t.Skip("the store keeps no outbox")
	}
	return s
}

func (x *suite[TTx]) outbox(cfg *outbox.Config) *outbox.Outbox[TTx] {
	x.t.Helper()
	o, err := outbox.New(x.outboxStore(), cfg)
	requireNoError(x.t, "outbox.New", err)
	return o
}

func (x *suite[TTx]) relay(o *outbox.Outbox[TTx], sink outbox.Sink, cfg *outbox.RelayConfig) *outbox.Relay {
	x.t.Helper()
	r, err := o.NewRelay(sink, cfg)
	requireNoError(x.t, "NewRelay", err)
	return r
}

func (x *suite[TTx]) relayOnce(r *outbox.Relay) outbox.Result {
	x.t.Helper()
	res, err := r.RelayOnce(context.Background())
	requireNoError(x.t, "RelayOnce", err)
	return res
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

func (x *suite[TTx]) begin() TTx {
	x.t.Helper()
	tx, err := x.s.Begin(context.Background())
	requireNoError(x.t, "Begin", err)
	return tx
}

// enqueueN enqueues n messages, perTx to a transaction, and returns their
// ids.
func (x *suite[TTx]) enqueueN(o *outbox.Outbox[TTx], n, perTx int, m func(i int) outbox.Message) []string {
	x.t.Helper()
	ctx := context.Background()
	var ids []string
	for i := 0; i < n; i += perTx {
		var msgs []outbox.Message
		for j := i; j < min(n, i+perTx); j++ {
			msgs = append(msgs, m(j))
		}
		tx := x.begin()
		got, err := o.EnqueueTx(ctx, tx, msgs...)
		requireNoError(x.t, "EnqueueTx", err)
		requireNoError(x.t, "commit", x.s.Driver.Commit(ctx, tx))
		ids = append(ids, got...)
	}
	return ids
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

// requireOutbox checks the counts of pending and parked rows.
func (x *suite[TTx]) requireOutbox(pending, parked int64) {
	x.t.Helper()
	st, err := x.client(nil).Admin().OutboxStats(context.Background())
	requireNoError(x.t, "outbox Stats", err)
	requireEqual(x.t, "pending and parked events", [2]int64{st.Pending, st.Parked}, [2]int64{pending, parked})
}

// retryConflicts runs fn again, a bounded number of times, while it fails
// with a conflict (SQLite's busy writer, a deadlock).
func (x *suite[TTx]) retryConflicts(fn func() error) error {
	var err error
	for range 20 {
		err = fn()
		if err == nil || x.s.Driver.Classify(err) != inboxdriver.ClassConflict {
			return err
		}
	}
	return err
}

func requireNoError(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func upper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'a' && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}
