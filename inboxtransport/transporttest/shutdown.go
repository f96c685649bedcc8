package transporttest

import (
	"context"
	"testing"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxtransport"
	"github.com/txinbox/inbox/outbox"

	"github.com/stretchr/testify/require"
)

func shutdownCases[TTx any]() []testCase[TTx] {
	return []testCase[TTx]{
		{"shutdown-drains-in-flight", testShutdownDrains[TTx]},
		{"shutdown-acks-nothing-uncommitted", testShutdownAcksNothingUncommitted[TTx]},
		{"run-twice", testRunTwice[TTx]},
	}
}

// A consumer told to stop lets the transaction in flight finish within
// ShutdownTimeout, and acknowledges it; what it received and did not start
// goes back to the broker, and the next consumer applies it once.
func testShutdownDrains[TTx any](t *testing.T, tr Transport[TTx]) {
	e := newEnv(t, tr, QueueOptions{}, nil)
	slow := newID()
	ids := []string{slow}
	msgs := []Message{msg(slow, event{N: 0, Fail: "slow"})}
	for i := range 30 {
		id := newID()
		ids = append(ids, id)
		msgs = append(msgs, msg(id, event{N: i + 1}))
	}
	e.publish(msgs...)
	h := e.handler()
	s := e.settings()
	s.Workers, s.MaxBatch = 1, 1
	r := e.start(h, s, ConsumerOptions[TTx]{}, nil)
	waitClosed(t, "the slow handler to start", h.started)
	stopped := make(chan error, 1)
	go func() { stopped <- r.Stop() }()
	close(h.release)
	require.NoError(t, <-stopped)
	require.Equal(t, 1, e.counts()[slow], "the transaction in flight finished")

	r2 := e.start(h, e.settings(), ConsumerOptions[TTx]{}, nil)
	e.waitApplied(ids...)
	e.waitDrained()
	require.NoError(t, r2.Stop())
	e.requireExactlyOnce(ids...)
	e.requireDrained()
	require.Equal(t, 1, h.tried(slow), "the drained message was acknowledged, not delivered again")
}

// A consumer whose shutdown timeout runs out cancels the transaction in
// flight, which rolls back, and acknowledges nothing it did not commit:
// the next consumer applies the message once.
func testShutdownAcksNothingUncommitted[TTx any](t *testing.T, tr Transport[TTx]) {
	e := newEnv(t, tr, QueueOptions{}, nil)
	slow := newID()
	e.publish(msg(slow, event{N: 0, Fail: "slow"}))
	h := e.handler()
	s := e.settings()
	s.ShutdownTimeout = -1 // cancel at once
	r := e.start(h, s, ConsumerOptions[TTx]{}, nil)
	waitClosed(t, "the slow handler to start", h.started)
	require.NoError(t, r.Stop())
	require.Zero(t, e.counts()[slow], "the cancelled transaction rolled back")

	close(h.release)
	r2 := e.start(h, e.settings(), ConsumerOptions[TTx]{}, nil)
	e.waitApplied(slow)
	e.waitDrained()
	require.NoError(t, r2.Stop())
	e.requireExactlyOnce(slow)
	e.requireDrained()
	require.Equal(t, 2, h.tried(slow), "delivered again after the cancelled try")
}

// A consumer runs once: a second Run returns inboxtransport.ErrRunTwice.
func testRunTwice[TTx any](t *testing.T, tr Transport[TTx]) {
	e := newEnv(t, tr, QueueOptions{}, nil)
	id := newID()
	e.publish(msg(id, event{N: 1}))
	c, err := e.q.Consumer(ConsumerOptions[TTx]{
		Client: e.client, Handler: e.handler(), Consumer: ConsumerName,
		Key: inbox.HeaderKey(outbox.HeaderEventID), Settings: e.settings(),
	})
	require.NoError(t, err)
	r := Start(t, context.Background(), c.Run, nil)
	e.waitApplied(id)
	require.NoError(t, r.Stop())
	require.ErrorIs(t, c.Run(context.Background()), inboxtransport.ErrRunTwice)
}
