package inboxnats

import (
	"strconv"
	"sync"
)

// maxExcused bounds the messages whose excused deliveries a consumer
// remembers.
const maxExcused = 10_000

// deliveryCounts counts, per stream message, the deliveries of a message
// that were not attempts: its processing failed for a reason that was not
// its own (the store was down, the streak breaker was open), or it was
// handed back unprocessed (a shutdown, an ordered batch stopped before it).
// JetStream counts every delivery in NumDelivered, so without them a
// message delivered during an outage would reach MaxDeliver having failed
// on its own fewer times, or never. The counts are this process's: a
// delivery to another consumer process is not known here. The map is
// bounded: when full, it starts afresh, and the messages it forgets count
// their deliveries in full again.
type deliveryCounts struct {
	mu    sync.Mutex
	limit int
	n     map[string]int
}

func newDeliveryCounts(limit int) *deliveryCounts {
	return &deliveryCounts{limit: limit, n: map[string]int{}}
}

// excusedKey names d's message, by stream and stream sequence; "" when
// its metadata gave none.
func excusedKey(d *delivery) string {
	if d.msg.Source.Offset <= 0 {
		return ""
	}
	return d.msg.Source.Queue + "/" + strconv.FormatInt(d.msg.Source.Offset, 10)
}

func (r *deliveryCounts) add(key string) {
	if key == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.n[key]; !ok && len(r.n) >= r.limit {
		clear(r.n)
	}
	r.n[key]++
}

func (r *deliveryCounts) get(key string) int {
	if key == "" {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[key]
}

func (r *deliveryCounts) forget(key string) {
	if key == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.n, key)
}
