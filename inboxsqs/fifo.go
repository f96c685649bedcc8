package inboxsqs

import (
	"context"
	"sync"
	"time"
)

// sequencer orders the deliveries of a FIFO queue by MessageGroupId: the
// deliveries of one group run one run at a time, in the order they were
// handed out; different groups run in parallel.
//
// It does not trust the server to hold a group back while one of its
// messages is in flight (SQS does; goaws v0.5.4 does not): a delivery of a
// group that is running waits behind it here, whichever receive it came in.
// After a run ends in a retry, the group is blocked until the retried
// message is due back, and every delivery of the group that is held or
// arrives meanwhile is handed back to the queue behind it, so that nothing
// overtakes it.
type sequencer struct {
	now    func() time.Time
	maxRun int

	mu      sync.Mutex
	groups  map[string]*group
	ready   []string // groups with pending deliveries and no run, oldest first
	inHand  int      // deliveries pushed and not yet finished or released
	changed chan struct{}
}

type group struct {
	pending      []*delivery
	running      bool
	blockedUntil time.Time
}

func newSequencer(maxRun int, now func() time.Time) *sequencer {
	return &sequencer{
		now:     now,
		maxRun:  maxRun,
		groups:  make(map[string]*group),
		changed: make(chan struct{}),
	}
}

// broadcast wakes every waiter. The caller holds s.mu.
func (s *sequencer) broadcast() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// wait blocks until cond, called with s.mu held, is true, or ctx is done.
// It returns with s.mu held when cond is true, and false without waiting
// once ctx is done.
func (s *sequencer) wait(ctx context.Context, cond func() bool) bool {
	for {
		if ctx.Err() != nil {
			return false
		}
		s.mu.Lock()
		if cond() {
			return true
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return false
		case <-ch:
		}
	}
}

// room waits until fewer than limit deliveries are in hand and returns how
// many more may be received, or 0 when ctx is done.
func (s *sequencer) room(ctx context.Context, limit int) int {
	if !s.wait(ctx, func() bool { return s.inHand < limit }) {
		return 0
	}
	defer s.mu.Unlock()
	return limit - s.inHand
}

// push adds a received delivery behind the others of its group. When the
// group is blocked it returns how long the delivery must stay invisible;
// the caller hands it back to the queue for that long.
func (s *sequencer) push(d *delivery) (backAfter time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.groups[d.group]
	if g == nil {
		g = &group{}
		s.groups[d.group] = g
	}
	if wait := g.blockedUntil.Sub(s.now()); wait > 0 {
		return wait
	}
	g.pending = append(g.pending, d)
	s.inHand++
	if !g.running && len(g.pending) == 1 {
		s.ready = append(s.ready, d.group)
	}
	s.broadcast()
	return 0
}

// next waits for a group that has pending deliveries and no run, marks it
// running and returns up to maxRun of its deliveries, oldest first. It
// returns false when ctx is done.
func (s *sequencer) next(ctx context.Context) (string, []*delivery, bool) {
	if !s.wait(ctx, func() bool { return len(s.ready) > 0 }) {
		return "", nil, false
	}
	defer s.mu.Unlock()
	key := s.ready[0]
	s.ready = s.ready[1:]
	g := s.groups[key]
	n := min(len(g.pending), s.maxRun)
	run := g.pending[:n:n]
	g.pending = g.pending[n:]
	g.running = true
	return key, run, true
}

// finish ends the group's run. settled deliveries of the run are done with;
// requeue are deliveries of the run that were not attempted, to run again
// first. A non-zero retryAt blocks the group until then: requeue and the
// group's pending deliveries are returned for the caller to hand back to
// the queue until retryAt.
func (s *sequencer) finish(key string, settled int, requeue []*delivery, retryAt time.Time) (back []*delivery) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.groups[key]
	g.running = false
	s.inHand -= settled
	if !retryAt.IsZero() {
		g.blockedUntil = retryAt
		back = append(requeue, g.pending...)
		g.pending = nil
		s.inHand -= len(back)
	} else {
		g.pending = append(requeue, g.pending...)
	}
	switch {
	case len(g.pending) > 0:
		s.ready = append(s.ready, key)
	case !g.blockedUntil.After(s.now()):
		delete(s.groups, key)
	}
	s.forgetExpired()
	s.broadcast()
	return back
}

// forgetExpired drops idle groups whose block has expired, so that the map
// does not grow with every group ever seen. The caller holds s.mu.
func (s *sequencer) forgetExpired() {
	now := s.now()
	for key, g := range s.groups {
		if !g.running && len(g.pending) == 0 && !g.blockedUntil.After(now) {
			delete(s.groups, key)
		}
	}
}

// drain removes and returns every pending delivery, for release at
// shutdown. Runs in progress keep theirs.
func (s *sequencer) drain() []*delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*delivery
	for _, g := range s.groups {
		out = append(out, g.pending...)
		g.pending = nil
	}
	s.ready = nil
	s.inHand -= len(out)
	s.broadcast()
	return out
}
