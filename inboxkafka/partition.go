package inboxkafka

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txinbox/inbox/inboxtransport"
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

	// queue holds the records fetched and not yet taken, each with its
	// message already made (enqueue), so that the worker goes from one
	// transaction to the next without converting records in between.
	qmu    sync.Mutex
	queue  []*record
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
// resumes reach the client in order. It makes each record's message here,
// on the poll loop's goroutine, while the worker's transaction runs.
func (p *partition) enqueue(recs []*kgo.Record, limit int, pause func()) {
	rs := make([]*record, len(recs))
	for i, r := range recs {
		rs[i] = p.record(r)
	}
	p.qmu.Lock()
	if !p.fetched && len(recs) > 0 {
		p.fetched, p.firstFetch = true, recs[len(recs)-1].Offset
	}
	for _, r := range rs {
		// The first fetch after the assignment may hold records that
		// were delivered to the partition's previous owner.
		r.tr.Message.Source.Redelivered = r.rec.Offset <= p.firstFetch
	}
	p.queue = append(p.queue, rs...)
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
func (p *partition) take(n, limit int, resume func()) ([]*record, bool) {
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
	bo := backoff{min: c.cfg.RetryBackoff, max: c.cfg.MaxRetryBackoff}
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
			if d := c.loop.Breaker().Paused(); d > 0 && !p.sleep(d) {
				return
			}
			step := batch
			suspect := p.suspect > 0
			if suspect {
				step = batch[:1]
				c.suspectMu.Lock()
			}
			if !c.beforeRun(p, step[0].rec, &bo) {
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
				c.afterDone(p, step[n-1].rec)
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

// attempt tries recs once, in order, through the delivery loop's Handle,
// which settles the records done through the partition's source: it marks
// them for commit. It returns how many records from the start are done
// (applied, duplicates, or dead-lettered) and whether to back off before
// trying the rest: a record's own failure, to try again after a backoff;
// or not the record's fault (the store's, a dependency's, a concurrent
// delivery's), or the streak breaker is open: not an attempt, never a
// reason to dead-letter. Otherwise (abandoned, or an earlier record was
// dead-lettered just now) the rest are tried at once.
func (c *Consumer[TTx]) attempt(p *partition, recs []*record) (done int, wait bool) {
	rs := make([]*record, len(recs))
	for i, r := range recs {
		rs[i] = r.fresh()
	}
	h := c.loop.Handle(p.ctx, partitionSource[TTx]{c, p}, rs)
	return h.Done, h.Retried
}

// partitionSource settles a partition's records for the delivery loop: a
// record done is marked for the offset commit; one that is not stays where
// it is, for the worker to try again or for the partition's next owner.
type partitionSource[TTx any] struct {
	c *Consumer[TTx]
	p *partition
}

// Receive is never called: the partition's worker takes its records.
func (partitionSource[TTx]) Receive(context.Context, int) ([]*record, error) { return nil, nil }

// Ack marks the last of rs, which are in offset order.
func (s partitionSource[TTx]) Ack(_ context.Context, rs []*record) { s.c.mark(s.p, rs[len(rs)-1].rec) }

// Reject marks r, which is in the dead-letter table (and topic).
func (s partitionSource[TTx]) Reject(_ context.Context, r *record, _ string) { s.c.mark(s.p, r.rec) }

// Retry is never called: a record is retried in place.
func (partitionSource[TTx]) Retry(context.Context, *record, time.Duration) {}

// Release leaves rs to the partition's next owner.
func (partitionSource[TTx]) Release(context.Context, []*record) {}

// record wraps r for the delivery policy; enqueue sets its
// Source.Redelivered.
func (p *partition) record(r *kgo.Record) *record {
	return &record{rec: r, tr: inboxtransport.Delivery{Message: message(r), Track: p.track + strconv.FormatInt(r.Offset, 10)}}
}

// fresh returns r as it was queued, with none of the delivery state of an
// earlier attempt: each attempt settles its own records once.
func (r *record) fresh() *record {
	return &record{rec: r.rec, tr: inboxtransport.Delivery{Message: r.tr.Message, Track: r.tr.Track}}
}
