package inboxtest

import (
	"context"
	"testing"

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
