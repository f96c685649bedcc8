package inboxkafka

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/internal/fault"
)

// partition is one assignment of a partition to this consumer, and the
// state of its worker.
type partition struct {
	tp  topicPartition
	gen uint64

	// ctx is the worker's context; cancel abandons the transaction in
	// flight, which rolls back.
	ctx    context.Context
	cancel context.CancelFunc
	// stop is closed when the worker must take no new work; done is
	// closed when the worker has returned.
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}

	qmu    sync.Mutex
	queue  []*kgo.Record
	paused bool
	wake   chan struct{}

	// next is the offset to commit: one past the last record done. It
	// and committed, the last offset committed, are guarded by
	// Consumer.mu.
	next      kgo.EpochOffset
	committed int64

	// attempts counts the retryable failures of records, by offset. Only
	// the worker touches it.
	attempts map[int64]int

	// The takeover ledger's state, which only the worker touches:
	// recorded is the position of the ledger's record for this
	// partition, or -1 when it holds none of this worker's; started is
	// the position recorded as started, or -1; suspect is how many more
	// records to process one at a time after a crash.
	recorded int64
	started  int64
	suspect  int
}

func newPartition(parent context.Context, tp topicPartition, gen uint64) *partition {
	ctx, cancel := context.WithCancel(parent)
	return &partition{
		tp:       tp,
		gen:      gen,
		ctx:      ctx,
		cancel:   cancel,
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
		wake:     make(chan struct{}, 1),
		attempts: make(map[int64]int),
		recorded: -1,
		started:  -1,
	}
}

// requestStop tells the worker to take no new work.
func (p *partition) requestStop() {
	p.stopOnce.Do(func() { close(p.stop) })
}

// abandon stops the worker and cancels its transaction in flight.
func (p *partition) abandon() {
	p.requestStop()
	p.cancel()
}

func (p *partition) stopping() bool {
	select {
	case <-p.stop:
		return true
	default:
		return false
	}
}

// enqueue adds records for the worker, and calls pause when the queue
// reaches limit. pause runs under the queue's lock, so that pauses and
// resumes reach the client in order.
func (p *partition) enqueue(recs []*kgo.Record, limit int, pause func()) {
	p.qmu.Lock()
	p.queue = append(p.queue, recs...)
	if !p.paused && len(p.queue) >= limit {
		p.paused = true
		pause()
	}
	p.qmu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// take waits for records and returns up to n of them, or false when the
// worker must stop. It resumes fetching the partition once the queue is
// down to half of limit.
func (p *partition) take(n, limit int, resume func()) ([]*kgo.Record, bool) {
	for {
		if p.stopping() {
			return nil, false
		}
		p.qmu.Lock()
		if len(p.queue) > 0 {
			k := min(n, len(p.queue))
			batch := p.queue[:k:k]
			p.queue = p.queue[k:]
			if len(p.queue) == 0 {
				p.queue = nil
			}
			if p.paused && len(p.queue) <= limit/2 {
				p.paused = false
				resume()
			}
			p.qmu.Unlock()
			return batch, true
		}
		p.qmu.Unlock()
		select {
		case <-p.wake:
		case <-p.stop:
			return nil, false
		}
	}
}

// sleep waits for d, and reports false if the worker must stop first.
func (p *partition) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-p.stop:
		return false
	case <-p.ctx.Done():
		return false
	}
}

// work is the partition's worker: it processes the partition's records in
// offset order, a batch at a time, until it is stopped.
func (c *Consumer[TTx]) work(p *partition) {
	defer close(p.done)
	defer c.takeoverStop(p)
	bo := backoff{min: c.cfg.MinBackoff, max: c.cfg.MaxBackoff}
	resume := func() { c.cl.ResumeFetchPartitions(map[string][]int32{p.tp.topic: {p.tp.partition}}) }
	first := true
	for {
		batch, ok := p.take(c.cfg.MaxBatch, c.cfg.MaxBuffered, resume)
		if !ok {
			return
		}
		if first {
			first = false
			if batch, ok = c.takeover(p, batch, &bo); !ok {
				return
			}
		}
		for len(batch) > 0 {
			// While the streak breaker is open, every partition waits,
			// before it takes the lock of the records run one at a time.
			if d := c.breaker.Paused(); d > 0 && !p.sleep(d) {
				return
			}
			step := batch
			suspect := p.suspect > 0
			if suspect {
				step = batch[:1]
				c.suspectMu.Lock()
			}
			if !c.beforeRun(p, step[0], &bo) {
				if suspect {
					c.suspectMu.Unlock()
				}
				return
			}
			n, wait := c.attempt(p, step)
			if suspect {
				c.suspectMu.Unlock()
			}
			batch = batch[n:]
			if n > 0 {
				bo.reset()
				c.afterDone(p, step[n-1])
			}
			if len(batch) == 0 {
				break
			}
			if p.stopping() {
				return
			}
			if wait && !p.sleep(bo.next()) {
				return
			}
		}
	}
}

// attempt tries recs once, in order. It returns how many records from the
// start are done (applied, duplicates, or dead-lettered) and whether to
// back off before trying the rest. It marks the done records for commit.
func (c *Consumer[TTx]) attempt(p *partition, recs []*kgo.Record) (done int, wait bool) {
	ctx := p.ctx
	msgs := make([]inbox.Message, len(recs))
	results := make([]inbox.BatchResult, len(recs))
	keyed := make([]bool, len(recs))
	batch := make([]inbox.Message, 0, len(recs))
	at := make([]int, 0, len(recs))
	for i, r := range recs {
		msgs[i] = message(r)
		id, err := c.client.Key(c.cfg.Key, msgs[i])
		if err != nil {
			results[i].Err = err
			continue
		}
		msgs[i].ID = id
		keyed[i] = true
		batch = append(batch, msgs[i])
		at = append(at, i)
	}
	if len(batch) > 0 {
		rs, err := c.client.ProcessBatchOrdered(ctx, c.cfg.Consumer, batch, c.handler)
		for k, i := range at {
			if err != nil {
				results[i].Err = err
			} else {
				results[i] = rs[k]
			}
		}
	}
	defer func() {
		if done > 0 {
			// The records are in the database (or the dead-letter
			// table); the offset is not committed yet.
			fault.Inject(ctx, fault.AfterCommitBeforeAck)
			c.mark(p, recs[done-1])
		}
	}()
	for i, r := range recs {
		res := results[i]
		if res.Err == nil {
			n := p.attempts[r.Offset]
			delete(p.attempts, r.Offset)
			c.breaker.Succeeded(ctx)
			c.report(Result{Record: r, ID: msgs[i].ID, Outcome: res.Outcome, Attempts: n})
			done++
			continue
		}
		if ctx.Err() != nil {
			// Abandoned: the failure is the cancellation's, not the
			// record's.
			return done, false
		}
		if errors.Is(res.Err, inbox.ErrNotAttempted) {
			// An earlier record failed and was dead-lettered just now:
			// try the rest at once.
			return done, false
		}
		n := p.attempts[r.Offset]
		d := c.breaker.Decide(ctx, msgs[i], res.Err, n+1, c.cfg.MaxAttempts)
		switch d.Action {
		case inbox.ActionDeadLetter:
			attempts := n + 1
			if !keyed[i] {
				attempts = 0 // never handled
			}
			if !c.deadLetter(p, r, msgs[i], res.Err, d.Reason, attempts) {
				return done, true
			}
		case inbox.ActionRetry:
			p.attempts[r.Offset] = n + 1
			c.logger.DebugContext(ctx, "inboxkafka: record failed; trying again after a backoff",
				"topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "attempt", n+1, "err", res.Err)
			c.report(Result{Record: r, ID: msgs[i].ID, Err: res.Err, Fault: d.Fault, Attempts: n + 1})
			return done, true
		default:
			// Not the record's fault (the store's, a dependency's, a
			// concurrent delivery's), or the streak breaker is open: not
			// an attempt, never a reason to dead-letter. The breaker logs
			// an outage once.
			c.report(Result{Record: r, ID: msgs[i].ID, Err: res.Err, Fault: d.Fault, Attempts: n})
			return done, true
		}
		delete(p.attempts, r.Offset)
		done++
	}
	return done, false
}

func (c *Consumer[TTx]) report(r Result) {
	if c.cfg.OnResult != nil {
		c.cfg.OnResult(r)
	}
}
