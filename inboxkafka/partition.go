package inboxkafka

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txinbox/inbox/inboxtransport"
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

	// fetched reports that records were enqueued, and firstFetch is the
	// last offset of the first fetch after the assignment: those records
	// may have been delivered to the partition's previous owner. Guarded
	// by qmu.
	fetched    bool
	firstFetch int64
	// track prefixes the names of the records in the policy's count of
	// attempts, which are counted per assignment.
	track string

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
		track:    fmt.Sprintf("kafka:%s/%d#%d@", tp.topic, tp.partition, gen),
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
	if !p.fetched && len(recs) > 0 {
		p.fetched, p.firstFetch = true, recs[len(recs)-1].Offset
	}
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
			if d := c.policy.Breaker().Paused(); d > 0 && !p.sleep(d) {
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

// redelivered reports whether the record at offset may have been
// delivered before: it came in the first fetch after the assignment.
func (p *partition) redelivered(offset int64) bool {
	p.qmu.Lock()
	defer p.qmu.Unlock()
	return p.fetched && offset <= p.firstFetch
}

// attempt tries recs once, in order, through the delivery policy. It
// returns how many records from the start are done (applied, duplicates,
// or dead-lettered) and whether to back off before trying the rest. It
// marks the done records for commit.
func (c *Consumer[TTx]) attempt(p *partition, recs []*kgo.Record) (done int, wait bool) {
	ctx := p.ctx
	rs := make([]*record, len(recs))
	for i, r := range recs {
		rs[i] = p.record(r)
	}
	ss := c.policy.Process(ctx, rs, true)
	defer func() {
		if done > 0 {
			// The records are in the database (or the dead-letter
			// table); the offset is not committed yet.
			fault.Inject(ctx, fault.AfterCommitBeforeAck)
			c.mark(p, recs[done-1])
		}
	}()
	for i, s := range ss {
		r, id := recs[i], rs[i].tr.Message.ID
		switch s.Verdict {
		case inboxtransport.Ack:
			c.report(Result{Record: r, ID: id, Outcome: s.Outcome, Attempts: s.Attempt - 1})
		case inboxtransport.DeadLettered:
			c.report(Result{Record: r, ID: id, Err: s.Err, Fault: s.Fault, Attempts: s.Attempt, DeadLettered: true})
		case inboxtransport.Retry:
			// The record's own failure, to try again after a backoff;
			// or not the record's fault (the store's, a dependency's, a
			// concurrent delivery's), or the streak breaker is open:
			// not an attempt, never a reason to dead-letter.
			n := s.Attempt
			if !s.Attempted {
				n--
			}
			c.report(Result{Record: r, ID: id, Err: s.Err, Fault: s.Fault, Attempts: n})
			return done, true
		default:
			// Abandoned (the failure is the cancellation's, not the
			// record's), or an earlier record failed and was
			// dead-lettered just now: try the rest at once.
			return done, false
		}
		done++
	}
	return done, false
}

// record wraps r for the delivery policy.
func (p *partition) record(r *kgo.Record) *record {
	m := message(r)
	m.Source.Redelivered = p.redelivered(r.Offset)
	return &record{rec: r, tr: inboxtransport.Delivery{Message: m, Track: p.track + strconv.FormatInt(r.Offset, 10)}}
}

func (c *Consumer[TTx]) report(r Result) {
	if c.cfg.OnResult != nil {
		c.cfg.OnResult(r)
	}
}
