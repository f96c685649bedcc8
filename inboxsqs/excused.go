package inboxsqs

import "sync"

// maxExcused bounds the messages whose excused receives a consumer
// remembers.
const maxExcused = 10_000

// receiveCounts counts, per SQS MessageId, the receives of a message that
// were not attempts: its processing failed for a reason that was not its
// own (the store was down, the streak breaker was open, a shutdown
// released it). SQS counts every receive in ApproximateReceiveCount, so
// without them a message received during an outage would reach
// MaxReceives having failed on its own fewer times, or never. The counts
// are this process's: a receive by another consumer is not known here. The
// map is bounded: when full, it starts afresh, and the messages it forgets
// count their receives in full again.
type receiveCounts struct {
	mu    sync.Mutex
	limit int
	n     map[string]int
}

func newReceiveCounts(limit int) *receiveCounts {
	return &receiveCounts{limit: limit, n: map[string]int{}}
}

func (r *receiveCounts) add(id string) {
	if id == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.n[id]; !ok && len(r.n) >= r.limit {
		clear(r.n)
	}
	r.n[id]++
}

func (r *receiveCounts) get(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[id]
}

func (r *receiveCounts) forget(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.n, id)
}
