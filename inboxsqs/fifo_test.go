package inboxsqs

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The sequencer tests cover FIFO behaviour goaws cannot show: it returns no
// MessageGroupId, so on goaws every message is in one group.

// fakeClock is a settable clock for the sequencer's group blocks.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func fifoDelivery(group string, n int) *delivery {
	d := &delivery{group: group}
	d.tr.Message.Source.BrokerID = fmt.Sprintf("%s/%d", group, n)
	return d
}

func brokerIDs(ds []*delivery) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.tr.Message.Source.BrokerID)
	}
	return out
}

// mustNext takes the next run, failing t if none is ready.
func mustNext(t *testing.T, s *sequencer) (string, []*delivery) {
	t.Helper()
	s.mu.Lock()
	ready := len(s.ready) > 0
	s.mu.Unlock()
	require.True(t, ready, "a run is ready")
	key, run, ok := s.next(context.Background()) // does not block: one is ready
	require.True(t, ok)
	return key, run
}

func noneReady(t *testing.T, s *sequencer) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	require.Empty(t, s.ready, "no run is ready")
}

func TestSequencerGroupsRunInParallelOneRunPerGroup(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{now: time.Unix(1000, 0)}
	s := newSequencer(10, clock.Now)
	require.Zero(t, s.push(fifoDelivery("A", 1)))
	require.Zero(t, s.push(fifoDelivery("B", 1)))

	keyA, runA := mustNext(t, s)
	require.Equal(t, "A", keyA)
	require.Equal(t, []string{"A/1"}, brokerIDs(runA))
	// B runs while A's run is in progress.
	keyB, runB := mustNext(t, s)
	require.Equal(t, "B", keyB)
	require.Equal(t, []string{"B/1"}, brokerIDs(runB))

	// The server hands out A's next message too eagerly, while A/1 is in
	// flight: it waits for A's run to end. C, another group, does not.
	require.Zero(t, s.push(fifoDelivery("A", 2)))
	noneReady(t, s)
	require.Zero(t, s.push(fifoDelivery("C", 1)))
	keyC, _ := mustNext(t, s)
	require.Equal(t, "C", keyC)
	noneReady(t, s)

	require.Empty(t, s.finish("A", 1, nil, time.Time{}))
	keyA, runA = mustNext(t, s)
	require.Equal(t, "A", keyA)
	require.Equal(t, []string{"A/2"}, brokerIDs(runA))
}

func TestSequencerRunsAreBoundedAndRequeueGoesFirst(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{now: time.Unix(1000, 0)}
	s := newSequencer(2, clock.Now)
	for n := 1; n <= 3; n++ {
		require.Zero(t, s.push(fifoDelivery("A", n)))
	}
	_, run := mustNext(t, s)
	require.Equal(t, []string{"A/1", "A/2"}, brokerIDs(run))
	require.Zero(t, s.push(fifoDelivery("A", 4)))
	// A/1 settled; A/2 was not attempted (its predecessor was
	// dead-lettered): it runs next, before A/3 and A/4.
	require.Empty(t, s.finish("A", 1, run[1:], time.Time{}))
	_, run = mustNext(t, s)
	require.Equal(t, []string{"A/2", "A/3"}, brokerIDs(run))
	s.finish("A", 2, nil, time.Time{})
	_, run = mustNext(t, s)
	require.Equal(t, []string{"A/4"}, brokerIDs(run))
}

func TestSequencerRetryBlocksItsGroup(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{now: time.Unix(1000, 0)}
	s := newSequencer(2, clock.Now)
	for n := 1; n <= 4; n++ {
		require.Zero(t, s.push(fifoDelivery("A", n)))
	}
	require.Zero(t, s.push(fifoDelivery("B", 1)))
	_, run := mustNext(t, s)
	require.Equal(t, []string{"A/1", "A/2"}, brokerIDs(run))

	// A/1 failed and is retried in 5s; A/2 was not attempted. A/2 and
	// the held A/3, A/4 go back to the queue behind A/1.
	retryAt := clock.Now().Add(5 * time.Second)
	back := s.finish("A", 1, run[1:], retryAt)
	require.Equal(t, []string{"A/2", "A/3", "A/4"}, brokerIDs(back))

	// While A is blocked, its messages go back too; B is not held up.
	clock.Advance(2 * time.Second)
	require.Equal(t, 3*time.Second, s.push(fifoDelivery("A", 5)))
	key, _ := mustNext(t, s)
	require.Equal(t, "B", key)
	noneReady(t, s)

	// When A/1 is due back, A takes messages again.
	clock.Advance(3 * time.Second)
	require.Zero(t, s.push(fifoDelivery("A", 1)))
	key, run = mustNext(t, s)
	require.Equal(t, "A", key)
	require.Equal(t, []string{"A/1"}, brokerIDs(run))
}

func TestSequencerRoomAndDrain(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{now: time.Unix(1000, 0)}
	s := newSequencer(10, clock.Now)
	for n := 1; n <= 3; n++ {
		require.Zero(t, s.push(fifoDelivery("A", n)))
	}
	require.Zero(t, s.push(fifoDelivery("B", 1)))
	require.Equal(t, 2, s.room(context.Background(), 6))

	// room blocks while full, and gives up when its context ends.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.Equal(t, 0, s.room(ctx, 4))

	_, run := mustNext(t, s) // A/1..A/3 in progress
	require.Len(t, run, 3)
	got := make(chan int, 1)
	go func() { got <- s.room(context.Background(), 4) }()
	s.finish("A", 3, nil, time.Time{})
	select {
	case n := <-got:
		require.Equal(t, 3, n)
	case <-time.After(time.Minute):
		t.Fatal("room did not wake when the run finished")
	}

	rest := s.drain()
	require.Equal(t, []string{"B/1"}, brokerIDs(rest))
	require.Equal(t, 4, s.room(context.Background(), 4))
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	_, _, ok := s.next(ctx)
	require.False(t, ok)
}

// Several workers over a server that hands out each group's messages
// across many receives, too eagerly: every group is processed in order and
// never by two workers at once.
func TestSequencerKeepsOrderWithConcurrentWorkers(t *testing.T) {
	t.Parallel()
	const groups, perGroup, workers = 5, 40, 4
	s := newSequencer(3, time.Now)
	var (
		mu        sync.Mutex
		processed = map[string][]int{}
		busy      [groups]atomic.Bool
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				key, run, ok := s.next(ctx)
				if !ok {
					return
				}
				g := int(key[1] - '0')
				if !busy[g].CompareAndSwap(false, true) {
					t.Errorf("group %s run by two workers at once", key)
				}
				for _, d := range run {
					var n int
					_, err := fmt.Sscanf(d.tr.Message.Source.BrokerID, key+"/%d", &n)
					if err != nil {
						t.Error(err)
					}
					mu.Lock()
					processed[key] = append(processed[key], n)
					mu.Unlock()
				}
				busy[g].Store(false)
				s.finish(key, len(run), nil, time.Time{})
			}
		})
	}
	// "Receives" of up to ten messages, mixing groups, in per-group order.
	next := make([]int, groups)
	for sent := 0; sent < groups*perGroup; {
		for range 10 {
			g := (sent*7 + sent/3) % groups
			for next[g] == perGroup {
				g = (g + 1) % groups
			}
			require.Zero(t, s.push(fifoDelivery(fmt.Sprintf("g%d", g), next[g])))
			next[g]++
			sent++
			if sent == groups*perGroup {
				break
			}
		}
	}
	deadline := time.Now().Add(time.Minute)
	for {
		mu.Lock()
		n := 0
		for _, p := range processed {
			n += len(p)
		}
		mu.Unlock()
		if n == groups*perGroup {
			break
		}
		require.True(t, time.Now().Before(deadline), "processed %d of %d", n, groups*perGroup)
		time.Sleep(time.Millisecond)
	}
	cancel()
	wg.Wait()
	for g := range groups {
		want := make([]int, perGroup)
		for i := range want {
			want[i] = i
		}
		require.Equal(t, want, processed[fmt.Sprintf("g%d", g)], "group g%d in order", g)
	}
}
