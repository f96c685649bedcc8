package inboxnats

import (
	"context"
	"fmt"
	"time"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/internal/fault"
)

// process processes a fetched batch through the inbox, as one batch
// (ProcessBatchOrdered when Ordered), and settles each message: ack what
// committed, dead-letter and terminate what never will, NakWithDelay what
// may succeed later, release what shutdown cancelled.
func (c *Consumer[TTx]) process(ctx context.Context, ds []*delivery) {
	errs := make([]error, len(ds))
	batch := make([]inbox.Message, 0, len(ds))
	at := make([]int, 0, len(ds))
	for i, d := range ds {
		id, err := c.client.Key(c.config.Key, d.msg)
		if err != nil {
			errs[i] = fmt.Errorf("inboxnats: key of message %s: %w", d.msg.Source, err)
			continue
		}
		d.msg.ID = id
		batch = append(batch, d.msg)
		at = append(at, i)
	}
	if len(batch) > 0 {
		var results []inbox.BatchResult
		var err error
		if c.config.Ordered {
			results, err = c.client.ProcessBatchOrdered(ctx, c.config.Consumer, batch, c.handler)
		} else {
			results, err = c.client.ProcessBatch(ctx, c.config.Consumer, batch, c.handler)
		}
		for k, i := range at {
			if err != nil {
				errs[i] = err
			} else {
				errs[i] = results[k].Err
			}
		}
	}
	cancelled := ctx.Err() != nil

	var ack, term, retry, release []*delivery
	var reasons []string
	unavailable, committed := false, false
	for i, d := range ds {
		key := excusedKey(d)
		attempt := c.attempt(d)
		act, dec := decide(ctx, c.breaker, d.msg, errs[i], attempt, c.maxDeliver, cancelled)
		switch act {
		case actAck:
			committed = true
			c.breaker.Succeeded(ctx)
			c.excused.forget(key)
			ack = append(ack, d)
		case actDeadLetter:
			if err := c.deadLetter(ctx, d, dec.Reason, errs[i], attempt); err != nil {
				// The store's failure, logged once per outage by the
				// breaker.
				dd := c.breaker.Decide(ctx, d.msg, err, 0, 0)
				c.logger.DebugContext(ctx, "inboxnats: could not dead-letter a message; it will be retried",
					"stream", c.config.Stream, "sequence", d.msg.Source.Offset, "reason", dec.Reason, "err", err)
				unavailable = unavailable || dd.Fault == inbox.FaultStore || dd.Fault == inbox.FaultSystemic
				c.excused.add(key)
				retry = append(retry, d)
				continue
			}
			c.excused.forget(key)
			term = append(term, d)
			reasons = append(reasons, dec.Reason)
		case actRetry:
			if dec.Action == inbox.ActionRetry {
				c.logger.WarnContext(ctx, "inboxnats: message failed; it will be retried",
					"stream", c.config.Stream, "sequence", d.msg.Source.Offset, "id", d.msg.ID,
					"attempt", attempt, "delivered", d.delivered, "err", errs[i])
			} else {
				// Not an attempt: the store's fault (logged once per
				// outage by the breaker), a dependency's, a concurrent
				// delivery's, or the streak breaker is open.
				c.excused.add(key)
				unavailable = unavailable || dec.Fault == inbox.FaultStore || dec.Fault == inbox.FaultSystemic
			}
			retry = append(retry, d)
		case actRelease, actRequeue:
			// Handed back unprocessed: its next delivery is no attempt
			// of this one's.
			c.excused.add(key)
			release = append(release, d)
		}
	}
	c.pauseFor(unavailable && !committed)

	if len(ack) > 0 || len(term) > 0 {
		// The messages are in the database (or the dead-letter store);
		// the broker does not know yet.
		fault.Inject(ctx, fault.AfterCommitBeforeAck)
	}
	for _, d := range ack {
		c.ack(ctx, d)
	}
	for i, d := range term {
		c.term(ctx, d, reasons[i])
	}
	for _, d := range retry {
		c.nak(ctx, d, retryDelay(c.config.RetryBackoff, c.config.MaxRetryBackoff, d.delivered))
	}
	c.release(ctx, release)
}

// attempt is the number of d's delivery counted as one of its message's
// attempts: its NumDelivered, less the deliveries this process excused
// (deliveryCounts), and at least 1, for this delivery is an attempt
// whatever the counts say. On the last delivery that the JetStream
// consumer's own MaxDeliver allows, it is at least MaxDeliver: the server
// will not deliver the message again, so a failure of its own must
// dead-letter it now.
func (c *Consumer[TTx]) attempt(d *delivery) int {
	if c.serverMaxDeliver > 0 && d.delivered >= c.serverMaxDeliver {
		return max(d.delivered, c.maxDeliver)
	}
	return max(d.delivered-c.excused.get(excusedKey(d)), 1)
}

// deadLetter stores d in the dead-letter store. The caller terminates d
// only when it returns nil.
func (c *Consumer[TTx]) deadLetter(ctx context.Context, d *delivery, reason string, cause error, attempts int) error {
	sctx, cancel := settleContext(ctx)
	defer cancel()
	return c.client.DeadLetter(sctx, inbox.DeadLetterParams{
		Consumer: c.config.Consumer,
		Message:  d.msg,
		Reason:   reason,
		Err:      cause,
		Attempts: attempts,
	})
}

// ack acknowledges d, whose transaction committed. A lost ack is logged and
// left: the message comes back when its AckWait runs out, and the inbox
// skips it.
func (c *Consumer[TTx]) ack(ctx context.Context, d *delivery) {
	if !c.settle(d) {
		return
	}
	var err error
	if c.config.DoubleAck {
		sctx, cancel := settleContext(ctx)
		err = d.raw.DoubleAck(sctx)
		cancel()
	} else {
		err = d.raw.Ack()
	}
	if err != nil {
		c.logger.WarnContext(ctx, "inboxnats: ack failed; the message will be delivered again and skipped",
			"stream", c.config.Stream, "sequence", d.msg.Source.Offset, "err", err)
	}
}

// term terminates d, which is in the dead-letter store, so that the server
// never delivers it again: TermWithReason where the server has it
// (2.10.4 and later), Term before, where TermWithReason is ignored and
// would leave the message to be redelivered.
func (c *Consumer[TTx]) term(ctx context.Context, d *delivery, reason string) {
	if !c.settle(d) {
		return
	}
	var err error
	if termWithReason(c.js.Conn().ConnectedServerVersion()) {
		err = d.raw.TermWithReason("inbox dead letter: " + reason)
	} else {
		err = d.raw.Term()
	}
	if err != nil {
		// It comes back and is dead-lettered again, which updates the
		// stored dead letter.
		c.logger.WarnContext(ctx, "inboxnats: term failed; the message will be delivered again",
			"stream", c.config.Stream, "sequence", d.msg.Source.Offset, "err", err)
	}
}

// nak asks for d to be delivered again after delay.
func (c *Consumer[TTx]) nak(ctx context.Context, d *delivery, delay time.Duration) {
	if !c.settle(d) {
		return
	}
	if err := d.raw.NakWithDelay(delay); err != nil {
		c.logger.WarnContext(ctx, "inboxnats: nak failed; the message comes back when its AckWait runs out",
			"stream", c.config.Stream, "sequence", d.msg.Source.Offset, "err", err)
	}
}

// release hands ds back for another consumer at once, with a plain Nak:
// nothing was wrong with them, the consumer is stopping.
func (c *Consumer[TTx]) release(ctx context.Context, ds []*delivery) {
	for _, d := range ds {
		if !c.settle(d) {
			continue
		}
		if err := d.raw.Nak(); err != nil {
			c.logger.DebugContext(ctx, "inboxnats: release failed; the message comes back when its AckWait runs out",
				"stream", c.config.Stream, "sequence", d.msg.Source.Offset, "err", err)
		}
	}
}

// settle marks d settled and stops its heartbeat. It reports whether d was
// still unsettled.
func (c *Consumer[TTx]) settle(d *delivery) bool {
	c.leases.remove(d)
	return d.settle()
}

// settleContext returns a context for a call that settles a message: it
// keeps ctx's values, outlives its cancellation, and is bounded.
func settleContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
}
