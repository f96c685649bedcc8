package transporttest

import (
	"testing"
	"time"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/outbox"

	"github.com/stretchr/testify/require"
)

func orderCases[TTx any]() []testCase[TTx] {
	return []testCase[TTx]{
		{"order-kept", testOrderKept[TTx]},
		{"slow-handler-is-not-delivered-twice", testSlowHandler[TTx]},
	}
}

// An ordered queue is applied in order: a message whose handler fails once
// holds back the ones after it until it is applied, and a dead-lettered one
// lets them through.
func testOrderKept[TTx any](t *testing.T, tr Transport[TTx]) {
	if !tr.Features.Ordered {
		t.Skip(tr.Name + " keeps no order")
	}
	e := newEnv(t, tr, QueueOptions{Ordered: true}, nil)
	const n = 12
	ids := make([]string, n)
	var msgs []Message
	for i := range n {
		ids[i] = newID()
		ev := event{N: i}
		switch i {
		case 4:
			ev.Fail = "once"
		case 8:
			ev.Fail = "permanent"
		}
		msgs = append(msgs, msg(ids[i], ev))
	}
	e.publish(msgs...)
	h := e.handler()
	r := e.start(h, e.settings(), ConsumerOptions[TTx]{Ordered: true}, nil)
	healthy := append(append([]string(nil), ids[:8]...), ids[9:]...)
	e.waitApplied(healthy...)
	e.waitDrained()
	require.NoError(t, r.Stop())
	e.requireDrained()
	require.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7, 9, 10, 11}, e.order())
	require.Equal(t, 2, h.tried(ids[4]), "the fourth event failed once, then held the rest back")
	dls := e.deadLetters()
	require.Len(t, dls, 1)
	require.Len(t, dls[ids[8]], 1)
}

// A transaction slower than the broker's hold on its message (an AckWait,
// a visibility timeout) keeps the message from other consumers: the
// consumer extends its hold while the handler runs.
func testSlowHandler[TTx any](t *testing.T, tr Transport[TTx]) {
	hold := tr.Features.HoldTime
	if hold <= 0 {
		t.Skip(tr.Name + " holds a message for as long as its consumer lives")
	}
	e := newEnv(t, tr, QueueOptions{}, nil)
	id := newID()
	e.publish(msg(id, event{N: 1, Fail: "slow"}))
	h := e.handler()
	var deliveries counter
	key := func(m inbox.Message) (string, error) {
		deliveries.add()
		return inbox.HeaderKey(outbox.HeaderEventID)(m)
	}
	opts := ConsumerOptions[TTx]{Key: key}
	a := e.start(h, e.settings(), opts, nil)
	b := e.start(h, e.settings(), opts, nil) // a second process on the same queue
	waitClosed(t, "the handler to start", h.started)
	// Three holds go by while the handler runs: no one may get the
	// message again meanwhile.
	began := time.Now()
	eventually(t, "the handler to run for three holds", func() (bool, error) {
		require.Equal(t, int64(1), deliveries.get(), "the message was delivered again while its handler ran")
		return time.Since(began) > 3*hold, nil
	})
	close(h.release)
	e.waitApplied(id)
	e.waitDrained()
	require.NoError(t, a.Stop())
	require.NoError(t, b.Stop())
	e.requireExactlyOnce(id)
	e.requireDrained()
	require.Equal(t, int64(1), deliveries.get(), "delivered once")
}
