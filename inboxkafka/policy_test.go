package inboxkafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/internal/require"
	"github.com/txinbox/inbox/internal/txcount"
)

// TestDuplicateReasons: the records of a partition's first fetch after an
// assignment may have been applied by its previous owner, whose offset
// commit was lost: a duplicate among them reaches the Observer as a
// redelivery. A record fetched later whose event was applied is a
// republish.
func TestDuplicateReasons(t *testing.T) {
	e := newEnv(t, protocols[0], envOpts{partitions: 1})
	obs := &txcount.Observer{}
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
	got := obs.Get()
	require.Equal(t, 1, got.Duplicates, "%+v", got)
	require.Equal(t, 1, got.Redelivered, "%+v", got)
	require.Zero(t, got.Republished, "%+v", got)

	// The producer sends the first event again: a later fetch.
	again := evs[0]
	again.n = 9
	e.produce([]event{again})
	e.waitCommittedToEnd(time.Minute)
	r.stop(t)
	got = obs.Get()
	require.Equal(t, 2, got.Duplicates, "%+v", got)
	require.Equal(t, 1, got.Redelivered, "%+v", got)
	require.Equal(t, 1, got.Republished, "%+v", got)
	e.requireExactlyOnce(ids(evs))
}
