package transporttest

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func exactlyOnceCases[TTx any]() []testCase[TTx] {
	return []testCase[TTx]{
		{"redelivery-and-republish", testRedeliveryAndRepublish[TTx]},
		{"duplicate-storm", testDuplicateStorm[TTx]},
	}
}

// A message whose handler fails once is delivered again and applied once,
// its first try rolled back; one event published twice, in one batch and
// across batches, is applied once and both copies are acknowledged.
func testRedeliveryAndRepublish[TTx any](t *testing.T, tr Transport[TTx]) {
	e := newEnv(t, tr, QueueOptions{}, nil)
	flaky, twice, apart := newID(), newID(), newID()
	var ids []string
	var msgs []Message
	for i := range 20 {
		id := newID()
		ids = append(ids, id)
		msgs = append(msgs, msg(id, event{N: i}))
	}
	msgs = append(msgs,
		msg(flaky, event{N: 100, Fail: "once"}),
		msg(twice, event{N: 101}), msg(twice, event{N: 101}),
		msg(apart, event{N: 102}))
	e.publish(msgs...)
	h := e.handler()
	r := e.start(h, e.settings(), ConsumerOptions[TTx]{}, nil)
	ids = append(ids, flaky, twice, apart)
	e.waitApplied(ids...)
	e.publish(msg(apart, event{N: 102})) // the same event again, later
	e.waitDrained()
	eventually(t, "the republish skipped", func() (bool, error) {
		_, dups, _ := e.results.get()
		return dups >= 2, nil
	})
	require.NoError(t, r.Stop())
	e.requireExactlyOnce(ids...)
	e.requireDrained()
	require.Equal(t, 2, h.tried(flaky), "the flaky event failed once and was delivered again")
}

// storm is how many copies of one event the duplicate storm publishes.
const storm = 32

// A storm of 32 copies of one event, amid other events, taken by two
// consumers with two workers each: the event is applied once, every copy is
// acknowledged, and each copy after the first is reported a duplicate.
func testDuplicateStorm[TTx any](t *testing.T, tr Transport[TTx]) {
	e := newEnv(t, tr, QueueOptions{}, nil)
	hot := newID()
	ids := []string{hot}
	var msgs []Message
	for i := range storm {
		msgs = append(msgs, msg(hot, event{N: 1000}))
		id := newID()
		ids = append(ids, id)
		msgs = append(msgs, msg(id, event{N: i}))
	}
	e.publish(msgs...)
	s := e.settings()
	s.MaxBatch = 4
	h := e.handler()
	a := e.start(h, s, ConsumerOptions[TTx]{}, nil)
	b := e.start(h, s, ConsumerOptions[TTx]{}, nil)
	e.waitApplied(ids...)
	eventually(t, "every copy settled", func() (bool, error) {
		_, dups, _ := e.results.get()
		return dups >= storm-1, nil
	})
	e.waitDrained()
	require.NoError(t, a.Stop())
	require.NoError(t, b.Stop())
	e.requireExactlyOnce(ids...)
	e.requireDrained()
	applied, dups, dead := e.results.get()
	if applied != len(ids) || dups < storm-1 || dead != 0 {
		t.Errorf("results: %d applied, %d duplicates, %d dead letters; want %d applied, at least %d duplicates, none dead",
			applied, dups, dead, len(ids), storm-1)
	}
}
