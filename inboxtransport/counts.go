package inboxtransport

import "sync"

// maxCounted bounds the messages whose deliveries a Policy counts.
const maxCounted = 10_000

// counts counts, per message (Delivery.Track), the failures of its own
// (attempts) and the deliveries that were no attempts (excused): its
// processing failed for a reason that was not its own (the store was
// down, the streak breaker was open), or it was handed back unprocessed (a
// shutdown, an ordered batch stopped before it). A broker's delivery count
// includes those, so without them a message delivered during an outage
// would reach its last attempt having failed on its own fewer times, or
// never; where the broker counts nothing, the failures are the count.
//
// The counts are this process's: they start again after a restart, and a
// delivery to another consumer process is not known here. It keeps at
// most limit messages, forgetting an arbitrary one to make room.
type counts struct {
	mu    sync.Mutex
	limit int
	n     map[string]count
}

type count struct{ failed, excused int }

func newCounts(limit int) *counts {
	return &counts{limit: limit, n: make(map[string]count)}
}

func (c *counts) get(key string) (failed, excused int) {
	if key == "" {
		return 0, 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n[key]
	return n.failed, n.excused
}

func (c *counts) fail(key string)   { c.update(key, func(n *count) { n.failed++ }) }
func (c *counts) excuse(key string) { c.update(key, func(n *count) { n.excused++ }) }

func (c *counts) update(key string, f func(*count)) {
	if key == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.n[key]
	if !ok && len(c.n) >= c.limit {
		for k := range c.n {
			delete(c.n, k)
			break
		}
	}
	f(&n)
	c.n[key] = n
}

// forget drops key's counts: the message was applied or dead-lettered.
func (c *counts) forget(key string) {
	if key == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.n, key)
}
