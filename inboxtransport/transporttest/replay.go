package transporttest

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
)

func replayCases[TTx any]() []testCase[TTx] {
	return []testCase[TTx]{
		{"marked-replay-runs-once", testMarkedReplay[TTx]},
	}
}

// A dead letter that an operator marks for replay ('inbox deadletters
// replay') is replayed by the running consumers with their handler, by
// default: applied once however many consumers race for it, and deleted.
func testMarkedReplay[TTx any](t *testing.T, tr Transport[TTx]) {
	e := newEnv(t, tr, QueueOptions{}, nil)
	id, other := newID(), newID()
	e.publish(msg(id, event{N: 1, Fail: "permanent-once"}), msg(other, event{N: 2}))
	h := e.handler()
	// One message per transaction: in a batch, the failure would roll
	// the batch back and its isolated retry would be a second try.
	s := e.settings()
	s.MaxBatch = 1
	a := e.start(h, s, ConsumerOptions[TTx]{}, nil)
	b := e.start(h, s, ConsumerOptions[TTx]{}, nil)
	e.waitApplied(other)
	eventually(t, "the dead letter", func() (bool, error) { return len(e.deadLetters()[id]) == 1, nil })
	require.Zero(t, e.counts()[id], "the permanent failure rolled back")

	driver, ok := e.client.Driver().(inboxdriver.Admin)
	require.True(t, ok, "the driver %T has no Admin", e.client.Driver())
	admin, err := inbox.NewAdmin(driver, nil)
	require.NoError(t, err)
	n, err := admin.DeadLetterReplay(context.Background(), inbox.DeadLetterReplayParams{Consumer: ConsumerName})
	require.NoError(t, err)
	require.Equal(t, int64(1), n)

	e.waitApplied(id)
	eventually(t, "the replayed dead letter deleted", func() (bool, error) { return len(e.deadLetters()[id]) == 0, nil })
	e.waitDrained()
	require.NoError(t, a.Stop())
	require.NoError(t, b.Stop())
	e.requireExactlyOnce(id, other)
	e.requireDrained()
	require.Equal(t, 2, h.tried(id), "one failed try, one replay")
}
