package inboxtest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/outbox"
)

// outboxCases exercise the outbox (package outbox) on a store that keeps
// one: the enqueue in the caller's transaction, and the relay's claims and
// write-backs. A store that does not implement inboxdriver.OutboxStore
// skips them.
func outboxCases[TTx any]() []testCase[TTx] {
	return []testCase[TTx]{
		{"OutboxEnqueueCommitsWithTheTransaction", testOutboxEnqueueCommitsWithTheTransaction[TTx]},
		{"OutboxKeepsTheCallersIDAndRefusesBadMessages", testOutboxKeepsTheCallersIDAndRefusesBadMessages[TTx]},
		{"OutboxHandlerOutputsCommitWithTheInboxRow", testOutboxHandlerOutputsCommitWithTheInboxRow[TTx]},
		{"OutboxManyRelaysPublishEachEventOnce", testOutboxManyRelaysPublishEachEventOnce[TTx]},
		{"OutboxRunningRelaysPublishEachEventOnce", testOutboxRunningRelaysPublishEachEventOnce[TTx]},
		{"OutboxEnqueueBatchNeedsAQueueingStore", testOutboxEnqueueBatchNeedsAQueueingStore[TTx]},
		{"OutboxLapsedClaimIsPublishedAgainWithTheSameID", testOutboxLapsedClaimIsPublishedAgainWithTheSameID[TTx]},
		{"OutboxRejectionsParkAfterTheBudget", testOutboxRejectionsParkAfterTheBudget[TTx]},
		{"OutboxUnreachableBrokerNeverParks", testOutboxUnreachableBrokerNeverParks[TTx]},
		{"OutboxOrderedKeepsEachKeysOrderAndBlocksOnlyTheFailingKey", testOutboxOrderedKeepsEachKeysOrderAndBlocksOnlyTheFailingKey[TTx]},
		{"OutboxOrderedRunGoesInOneCallToAnOrderKeepingSink", testOutboxOrderedRunGoesInOneCallToAnOrderKeepingSink[TTx]},
		{"OutboxOrderedRunStopsAtItsFirstFailure", testOutboxOrderedRunStopsAtItsFirstFailure[TTx]},
		{"OutboxOrderedSinkWithoutTheCapabilityGetsOneRecordPerKeyACall", testOutboxOrderedSinkWithoutTheCapabilityGetsOneRecordPerKeyACall[TTx]},
		{"OutboxOrderedClaimCutsByPositionOrTakesWholeRuns", testOutboxOrderedClaimCutsByPositionOrTakesWholeRuns[TTx]},
		{"OutboxOrderedWholeRunsLockOnlyTheKeysTaken", testOutboxOrderedWholeRunsLockOnlyTheKeysTaken[TTx]},
		{"OutboxOrderedSequencesConcurrentProducers", testOutboxOrderedSequencesConcurrentProducers[TTx]},
		{"OutboxStatsListAndOperatorActions", testOutboxStatsListAndOperatorActions[TTx]},
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
func (x *suite[TTx]) requireOutbox(o *outbox.Outbox[TTx], pending, parked int64) {
	x.t.Helper()
	st, err := o.Stats(context.Background())
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
