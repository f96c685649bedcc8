package inboxkafka_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/internal/require"
)

// txCounter is an Observer that sums its TxEvents.
type txCounter struct {
	mu sync.Mutex
	n  txTally
}

type txTally struct {
	txs, msgs, duplicates, redelivered, repub int
	maxMsgs                                   int
}

func (o *txCounter) TxStart(ctx context.Context, _ string, _ []inbox.Message) context.Context {
	return ctx
}
func (o *txCounter) DeadLettered(context.Context, *inbox.DeadLetterEvent) {}
func (o *txCounter) TxEnd(_ context.Context, e *inbox.TxEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.n.txs++
	o.n.msgs += e.Messages
	o.n.maxMsgs = max(o.n.maxMsgs, e.Messages)
	o.n.duplicates += e.Duplicates
	o.n.redelivered += e.Redelivered
	o.n.repub += e.Republished
}

func (o *txCounter) get() txTally {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n
}

// TestDuplicateReasons: the records of a partition's first fetch after an
// assignment may have been applied by its previous owner, whose offset
// commit was lost: a duplicate among them reaches the Observer as a
// redelivery. A record fetched later whose event was applied is a
// republish.
func TestDuplicateReasons(t *testing.T) {
	e := newEnv(t, protocols[0], envOpts{partitions: 1})
	obs := &txCounter{}
	var err error
	e.client, err = inbox.NewClient(e.client.Driver(), &inbox.Config{Observer: obs})
	require.NoError(t, err)
	evs := events(3, 1)
	// The previous owner applied the second event and went down before
	// it committed the offset.
	_, err = e.client.Process(context.Background(), "billing", inbox.Message{ID: evs[1].id, Headers: map[string]string{"n": "2"}}, e.handler())
	require.NoError(t, err)
	e.produce(evs)
	r := e.start("a", consumerConfig(), e.handler())
	e.waitCommittedToEnd(time.Minute)
	got := obs.get()
	require.Equal(t, 1, got.duplicates, "%+v", got)
	require.Equal(t, 1, got.redelivered, "%+v", got)
	require.Zero(t, got.repub, "%+v", got)

	// The producer sends the first event again: a later fetch.
	again := evs[0]
	again.n = 9
	e.produce([]event{again})
	e.waitCommittedToEnd(time.Minute)
	r.stop(t)
	got = obs.get()
	require.Equal(t, 2, got.duplicates, "%+v", got)
	require.Equal(t, 1, got.redelivered, "%+v", got)
	require.Equal(t, 1, got.repub, "%+v", got)
	e.requireExactlyOnce(ids(evs))
}
