package inboxtransport

import "sync"

// Held is the set of deliveries a consumer holds, from their receipt until
// each is settled, for a heartbeat to keep them from being delivered
// again (an SQS visibility extension, a JetStream InProgress). Its zero
// value is empty and ready; it is safe for concurrent use.
type Held[D comparable] struct {
	mu sync.Mutex
	m  map[D]struct{}
}

// Add holds ds.
func (h *Held[D]) Add(ds ...D) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = make(map[D]struct{})
	}
	for _, d := range ds {
		h.m[d] = struct{}{}
	}
}

// Remove lets d go: it was settled.
func (h *Held[D]) Remove(d D) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.m, d)
}

// All returns the deliveries held.
func (h *Held[D]) All() []D {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]D, 0, len(h.m))
	for d := range h.m {
		out = append(out, d)
	}
	return out
}
