package inboxkafka

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxtransport"
)

// The takeover ledger bounds a record that crashes its consumer (see
// Config.MaxCrashes). A worker records, once per takeover, the record it is
// about to process first, and keeps a record in the ledger for as long as
// it owns the partition: only a clean stop clears it. So a record found at
// a takeover means that the owner before went down. The ledger counts a
// crash against a record only if the record had started (inboxtransport.Ledger.Start)
// when the process went down: the first record after a takeover, and,
// after a crash, each record that the worker then runs one at a time,
// committing each offset at once, so that the next crash, if any, is
// counted against the record that caused it.
//
// After a crash, the records that the consumer's partitions run one at a
// time run one at a time across the whole consumer too (suspectMu): a
// record that takes the process down then takes down no other started
// record with it, which would count a crash against a healthy record of
// another partition.
//
// Clearing the record once the first batch is done, or once an offset is
// committed past it, would lose every crash that happens in a later batch:
// the crashing record would never be first after a takeover that found a
// record.

// source names a partition in the takeover ledger.
func (p *partition) source() string {
	return fmt.Sprintf("kafka:%s/%d", p.tp.topic, p.tp.partition)
}

// takeover records the takeover of p, whose first records are batch, and
// dead-letters the first record when it has crashed its consumers
// MaxCrashes times in a row. It returns the records left to process, and
// false when the worker must stop.
func (c *Consumer[TTx]) takeover(p *partition, batch []*record, bo *backoff) ([]*record, bool) {
	if c.cfg.MaxCrashes < 0 || len(batch) == 0 {
		return batch, true
	}
	r := batch[0].fresh()
	first := r.rec
	var tk inboxtransport.Takeover
	for {
		var err error
		tk, err = c.ledger.Record(p.ctx, p.source(), first.Offset)
		if err == nil {
			break
		}
		if !c.ledgerFailed(p, inbox.Message{}, "record the takeover of a partition", err, bo) {
			return nil, false
		}
	}
	bo.reset()
	p.recorded, p.started = first.Offset, -1
	crashes := tk.Count - 1
	if crashes >= c.cfg.MaxCrashes {
		// The loop keys the record and checks the inbox first: an owner
		// that went down after its commit was not crashed by it.
		for {
			_, err := c.loop.DeadLetterCrashed(p.ctx, r, crashes)
			if err == nil {
				break
			}
			if !c.ledgerFailed(p, r.tr.Message, "settle a record that crashed its consumer", err, bo) {
				return nil, false
			}
		}
		bo.reset()
		c.mark(p, first)
		c.commitNow(p)
		return batch[1:], true
	}
	if tk.Crashed {
		p.suspect = 2 * c.cfg.MaxBatch
		c.logger.WarnContext(p.ctx, "inboxkafka: the partition's last owner went down; processing one record at a time to find the record that crashed it",
			"topic", p.tp.topic, "partition", p.tp.partition, "offset", first.Offset, "takeovers", tk.Count)
	}
	return batch, true
}

// beforeRun records in the ledger that rec is about to run, when a crash
// must count against it: the first record after a takeover, and every
// record run alone after a crash. It reports false when the worker must
// stop.
func (c *Consumer[TTx]) beforeRun(p *partition, rec *kgo.Record, bo *backoff) bool {
	if p.recorded < 0 || p.started == rec.Offset || (p.suspect == 0 && rec.Offset != p.recorded) {
		return true
	}
	for {
		err := c.ledger.Start(p.ctx, p.source(), rec.Offset)
		if err == nil {
			p.recorded, p.started = rec.Offset, rec.Offset
			return true
		}
		if !c.ledgerFailed(p, inbox.Message{}, "record the start of a record", err, bo) {
			return false
		}
	}
}

// ledgerFailed handles a failure of the store while the worker works the
// takeover ledger, or looks a record up in the inbox before it
// dead-letters it: the store's failure, never the record's. As for any
// store failure, the Breaker judges it and logs an outage once (each
// failure after the first at Debug), and the worker waits a backoff before
// it tries again. It reports false when the worker must stop.
func (c *Consumer[TTx]) ledgerFailed(p *partition, msg inbox.Message, what string, err error, bo *backoff) bool {
	if p.stopping() || p.ctx.Err() != nil {
		// Stopping, or abandoned: the failure may be the cancellation's.
		return false
	}
	if f := inbox.Judge(err); f == inbox.FaultMessage || f == inbox.FaultPermanent {
		// Not expected of the inbox's own work; never count it as the
		// record's, nor in the streak.
		c.logger.WarnContext(p.ctx, "inboxkafka: could not "+what+"; trying again after a backoff",
			"topic", p.tp.topic, "partition", p.tp.partition, "err", err)
		return p.sleep(bo.next())
	}
	c.loop.Breaker().Decide(p.ctx, msg, err, 0, 0)
	c.logger.DebugContext(p.ctx, "inboxkafka: could not "+what+"; trying again after a backoff",
		"topic", p.tp.topic, "partition", p.tp.partition, "err", err)
	return p.sleep(bo.next())
}

// afterDone runs after the records up to last are done. After a crash it
// commits last's offset at once, so that a crash on the next record makes
// the next takeover start there.
func (c *Consumer[TTx]) afterDone(p *partition, _ *kgo.Record) {
	if p.suspect > 0 {
		c.commitNow(p)
		p.suspect--
	}
}

// takeoverStop clears the ledger's record when the worker stops without a
// crash: the next owner must not count this owner's stop against the
// record.
func (c *Consumer[TTx]) takeoverStop(p *partition) {
	if p.recorded >= 0 {
		c.clearTakeover(p)
	}
}

// clearTakeover clears the ledger's record, on a context of its own: it
// runs when the worker's context may be cancelled.
func (c *Consumer[TTx]) clearTakeover(p *partition) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(p.ctx), 5*time.Second)
	defer cancel()
	if err := c.ledger.Done(ctx, p.source(), p.recorded); err != nil {
		// The next owner will take this stop for a crash, and process a
		// few records one at a time: slower, never wrong.
		c.logger.WarnContext(ctx, "inboxkafka: could not clear the takeover record", "topic", p.tp.topic, "partition", p.tp.partition, "err", err)
		return
	}
	p.recorded = -1
}

// commitNow commits p's marked offset at once. A failure is left to the
// commit loop, which retries.
func (c *Consumer[TTx]) commitNow(p *partition) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(p.ctx), 5*time.Second)
	defer cancel()
	if err := c.commit(ctx, map[topicPartition]*partition{p.tp: p}); err != nil {
		c.logger.DebugContext(ctx, "inboxkafka: could not commit an offset at once; the commit loop will", "err", err)
	}
}
