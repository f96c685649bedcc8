package inboxrabbit

import "sync"

// maxTrackedAttempts bounds the events whose failed attempts a consumer
// counts.
const maxTrackedAttempts = 10000

// attempts counts, by event id, the failed attempts of events, for queues
// whose broker counts no deliveries (classic queues), and the deliveries
// that were not attempts (excused), which a quorum queue's x-delivery-count
// includes: the delivery was held or requeued for a failure that was not
// its own (the store was down, the streak breaker was open), or handed
// back unprocessed (a shutdown, an ordered batch stopped before it).
// Without them a message delivered during an outage would reach
// MaxDeliveries having failed on its own fewer times, or never.
//
// The counts live in this process: they start again after a restart, and
// each consumer process has its own, so on a classic queue the bound holds
// per process, and on a quorum queue a delivery excused by another process
// counts in full here. It keeps at most limit ids, forgetting an arbitrary
// one to make room.
type attempts struct {
	mu    sync.Mutex
	limit int
	byID  map[string]counts
}

type counts struct{ failed, excused int }

func newAttempts(limit int) *attempts {
	return &attempts{limit: limit, byID: make(map[string]counts)}
}

// get returns the failed attempts counted for id.
func (a *attempts) get(id string) int {
	if id == "" {
		return 0
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.byID[id].failed
}

// excused returns the deliveries of id counted as no attempt.
func (a *attempts) excused(id string) int {
	if id == "" {
		return 0
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.byID[id].excused
}

// fail counts one more failed attempt of id.
func (a *attempts) fail(id string) {
	a.update(id, func(c *counts) { c.failed++ })
}

// excuse counts one more delivery of id that was no attempt.
func (a *attempts) excuse(id string) {
	a.update(id, func(c *counts) { c.excused++ })
}

func (a *attempts) update(id string, f func(*counts)) {
	if id == "" {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	c, ok := a.byID[id]
	if !ok && len(a.byID) >= a.limit {
		for k := range a.byID {
			delete(a.byID, k)
			break
		}
	}
	f(&c)
	a.byID[id] = c
}

// forget drops id's counts: it was applied or dead-lettered.
func (a *attempts) forget(id string) {
	if id == "" {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.byID, id)
}
