package inboxrabbit

import "sync"

// maxTrackedAttempts bounds the events whose failed attempts a consumer
// counts.
const maxTrackedAttempts = 10000

// attempts counts the failed attempts of events, by id, for queues whose
// broker counts no deliveries (classic queues). The count lives in this
// process: it starts again after a restart, and each consumer process has
// its own, so on a classic queue the bound holds per process. It keeps at
// most limit ids, forgetting an arbitrary one to make room.
type attempts struct {
	mu    sync.Mutex
	limit int
	byID  map[string]int
}

func newAttempts(limit int) *attempts {
	return &attempts{limit: limit, byID: make(map[string]int)}
}

// get returns the failed attempts counted for id.
func (a *attempts) get(id string) int {
	if id == "" {
		return 0
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.byID[id]
}

// fail counts one more failed attempt of id.
func (a *attempts) fail(id string) {
	if id == "" {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.byID[id]; !ok && len(a.byID) >= a.limit {
		for k := range a.byID {
			delete(a.byID, k)
			break
		}
	}
	a.byID[id]++
}

// forget drops id's count: it was applied or dead-lettered.
func (a *attempts) forget(id string) {
	if id == "" {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.byID, id)
}
