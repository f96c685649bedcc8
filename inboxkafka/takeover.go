package inboxkafka

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txinbox/inbox"
)

// The takeover ledger bounds a record that crashes its consumer (see
// Config.MaxCrashes). A worker records, once per takeover, the record it is
// about to process first, and keeps that record in the ledger for as long
// as it owns the partition: only a clean stop clears it. So a record found
// at a takeover means that the owner before went down, wherever it was;
// and the count of a position goes up each time a takeover finds the same
// record first again. After such a crash the worker goes one record at a
// time, moving the ledger's record before each one and committing its
// offset at once, so that the next crash, if any, is counted against the
// record that caused it.
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
func (c *Consumer[TTx]) takeover(p *partition, batch []*kgo.Record, bo *backoff) ([]*kgo.Record, bool) {
	if c.cfg.MaxCrashes < 0 || len(batch) == 0 {
		return batch, true
	}
	first := batch[0]
	var tk inbox.Takeover
	for {
		var err error
		tk, err = c.client.RecordTakeover(p.ctx, c.cfg.Consumer, p.source(), first.Offset)
		if err == nil {
			break
		}
		// The store's failure, never the record's: wait, as for any
		// store outage, and try again.
		c.logger.WarnContext(p.ctx, "inboxkafka: could not record the takeover of a partition; trying again after a backoff",
			"topic", p.tp.topic, "partition", p.tp.partition, "err", err)
		if p.stopping() || !p.sleep(bo.next()) {
			return nil, false
		}
	}
	bo.reset()
	p.recorded = first.Offset
	crashes := tk.Count - 1
	if crashes >= c.cfg.MaxCrashes {
		cause := fmt.Errorf("inboxkafka: the consumer went down %d times in a row with this record first, and never got past it", crashes)
		c.logger.ErrorContext(p.ctx, "inboxkafka: dead-lettering a record that crashes its consumer, without running its handler",
			"topic", first.Topic, "partition", first.Partition, "offset", first.Offset, "crashes", crashes)
		msg := message(first)
		if id, err := c.client.Key(c.cfg.Key, msg); err == nil {
			msg.ID = id
		}
		for !c.deadLetter(p, first, msg, cause, inbox.ReasonCrashedConsumer, crashes) {
			if p.stopping() || !p.sleep(bo.next()) {
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

// beforeSuspect moves the ledger's record to rec, which is about to be
// processed alone after a crash. It reports false when the worker must
// stop.
func (c *Consumer[TTx]) beforeSuspect(p *partition, rec *kgo.Record, bo *backoff) bool {
	if p.recorded == rec.Offset {
		return true
	}
	for {
		err := c.client.MoveTakeover(p.ctx, c.cfg.Consumer, p.source(), rec.Offset)
		if err == nil {
			p.recorded = rec.Offset
			return true
		}
		c.logger.WarnContext(p.ctx, "inboxkafka: could not move the takeover record; trying again after a backoff",
			"topic", p.tp.topic, "partition", p.tp.partition, "err", err)
		if p.stopping() || !p.sleep(bo.next()) {
			return false
		}
	}
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
	if err := c.client.TakeoverDone(ctx, c.cfg.Consumer, p.source(), p.recorded); err != nil {
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
