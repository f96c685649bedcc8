package inboxkafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxmigrate"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/inboxtype"
	"github.com/txinbox/inbox/internal/testdb"
	"github.com/txinbox/inbox/internal/uuid"
)

// On an inbox partitioned by the ids' time, a record whose id is from a
// day already dropped (a replay beyond retention), from far in the future,
// or not time-ordered is dead-lettered with its reason and its offset
// committed: never applied, never dropped, and its partition moves on.
func TestPartitionedInboxDeadLettersOutOfRangeIDs(t *testing.T) {
	t.Parallel()
	e := newEnv(t, protocolNamed("classic"), envOpts{partitions: 1})
	ctx := context.Background()
	d, err := inboxpgx.New(e.pool, &inboxpgx.Config{
		Tables:     inboxdriver.Tables{Schema: testdb.Schema(t), Layout: inboxdriver.LayoutPartitioned},
		Partitions: inboxdriver.PartitionConfig{MaxSkew: time.Hour},
	})
	require.NoError(t, err)
	m, err := inboxmigrate.New(d)
	require.NoError(t, err)
	_, err = m.Up(ctx)
	require.NoError(t, err)
	e.client, err = inbox.NewClient[pgx.Tx](d, &inbox.Config{ReplayHorizon: time.Hour, Retention: 2 * 24 * time.Hour})
	require.NoError(t, err)

	now := time.Now()
	old := event{id: uuid.V7(now.Add(-5 * 24 * time.Hour)), key: "k0", n: 1, partition: -1}
	good := []event{{id: uuid.V7(now), key: "k0", n: 2, partition: -1}, {id: uuid.V7(now), key: "k0", n: 7, partition: -1}}
	var tl tally
	cfg := consumerConfig()
	cfg.OnResult = tl.observe
	r := e.start("a", cfg, e.handler())
	e.produce([]event{old, good[0]})
	e.waitCommittedToEnd(time.Minute)

	// The old event's day expires.
	rep, err := e.client.Admin().PartitionMaintain(ctx, inboxtype.PartitionMaintainParams{Drop: true})
	require.NoError(t, err)
	require.NotEmpty(t, rep.Dropped)

	bad := []event{
		{id: old.id, key: "k0", n: 3, partition: -1}, // the replay
		{id: uuid.V4(), key: "k0", n: 4, partition: -1},
		{id: uuid.V7(now.Add(60 * 24 * time.Hour)), key: "k0", n: 5, partition: -1},
	}
	e.produce(append(bad, good[1]))
	e.waitCommittedToEnd(2 * time.Minute)
	r.stop(t)

	e.requireExactlyOnce(ids([]event{old, good[0], good[1]}))
	ds := e.deadLetters()
	require.Len(t, ds, len(bad))
	for i, reason := range []string{inbox.ReasonExpiredID, inbox.ReasonNotTimeOrdered, inbox.ReasonFutureID} {
		require.Equal(t, reason, ds[i].Reason, "dead letter %d: %s", i, ds[i].Error)
		if reason == inbox.ReasonNotTimeOrdered {
			// Refused by the key, as a malformed id is: the id is named
			// in the error.
			require.Contains(t, ds[i].Error, bad[i].id)
		} else {
			require.Equal(t, bad[i].id, ds[i].MessageID)
		}
		require.Equal(t, int64(i+2), ds[i].Offset)
	}
	require.EqualValues(t, len(bad), tl.deadLettered.Load())
}
