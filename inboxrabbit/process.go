package inboxrabbit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/internal/fault"
)

// process processes a batch of deliveries through the inbox, as one batch
// (ProcessBatchOrdered when Ordered), and settles each: ack what
// committed, dead-letter and Nack without requeue what never will, hold
// and then requeue what may succeed later, and leave what shutdown
// cancelled to the closing channel. When Ordered, it returns what may
// succeed later instead, with the backoff to wait, for the worker to try
// again in place: a requeued delivery goes to the back of a quorum queue.
func (c *Consumer[TTx]) process(ctx context.Context, ds []*delivery) (again []*delivery, wait time.Duration) {
	errs := make([]error, len(ds))
	batch := make([]inbox.Message, 0, len(ds))
	at := make([]int, 0, len(ds))
	for i, d := range ds {
		id, err := c.client.Key(c.config.Key, d.msg)
		if err != nil {
			errs[i] = fmt.Errorf("inboxrabbit: key of a delivery from %s: %w", c.config.Queue, err)
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

	var ack, reject, retry, requeue []*delivery
	// excused marks the deliveries of retry whose failure was no attempt.
	var excused []bool
	unavailable, committed := false, false
	for i, d := range ds {
		attempt := c.attempt(d)
		act, dec := decide(ctx, c.breaker, d.msg, errs[i], attempt, c.config.MaxDeliveries, cancelled)
		switch act {
		case actAck:
			committed = true
			c.breaker.Succeeded(ctx)
			c.attempts.forget(d.msg.ID)
			ack = append(ack, d)
		case actDeadLetter:
			if err := c.deadLetter(ctx, d, dec.Reason, errs[i], attempt); err != nil {
				// The store's failure, logged once per outage by the
				// breaker.
				dd := c.breaker.Decide(ctx, d.msg, err, 0, 0)
				c.logger.DebugContext(ctx, "inboxrabbit: could not dead-letter a message; it will be retried",
					"queue", c.config.Queue, "id", d.msg.ID, "reason", dec.Reason, "err", err)
				unavailable = unavailable || dd.Fault == inbox.FaultStore || dd.Fault == inbox.FaultSystemic
				retry, excused = append(retry, d), append(excused, true)
				continue
			}
			c.attempts.forget(d.msg.ID)
			reject = append(reject, d)
		case actRetry:
			if dec.Action == inbox.ActionRetry {
				c.attempts.fail(d.msg.ID)
				c.logger.WarnContext(ctx, "inboxrabbit: message failed; it will be retried",
					"queue", c.config.Queue, "id", d.msg.ID, "attempt", attempt, "err", errs[i])
			} else {
				// Not an attempt: the store's fault (logged once per
				// outage by the breaker), a dependency's, a concurrent
				// delivery's, or the streak breaker is open.
				unavailable = unavailable || dec.Fault == inbox.FaultStore || dec.Fault == inbox.FaultSystemic
			}
			retry, excused = append(retry, d), append(excused, dec.Action != inbox.ActionRetry)
		case actRequeue:
			c.attempts.excuse(d.msg.ID)
			requeue = append(requeue, d)
		case actRelease:
			// Left unacknowledged: Run closes the channel, which
			// requeues it.
			c.attempts.excuse(d.msg.ID)
		}
	}
	c.pauseFor(unavailable && !committed)

	if len(ack) > 0 || len(reject) > 0 {
		// The messages are in the database (or the dead-letter store);
		// the broker does not know yet.
		fault.Inject(ctx, fault.AfterCommitBeforeAck)
	}
	for _, d := range ack {
		c.settle(ctx, d, "ack", func() error { return d.raw.Ack(false) })
	}
	for _, d := range reject {
		// A dead-letter exchange on the queue gets it too.
		c.settle(ctx, d, "nack", func() error { return d.raw.Nack(false, false) })
	}
	for _, d := range requeue {
		c.settle(ctx, d, "requeue", func() error { return d.raw.Nack(false, true) })
	}
	for i, d := range retry {
		delay := retryDelay(c.config.RetryBackoff, c.config.MaxRetryBackoff, c.delivered(d))
		if c.config.Ordered {
			// Tried again in place: the broker does not count it.
			again = append(again, d)
			wait = max(wait, delay)
			continue
		}
		if excused[i] {
			// Requeued, it comes back with one more delivery that was no
			// attempt.
			c.attempts.excuse(d.msg.ID)
		}
		d.sess.later(delay, func() {
			c.settle(context.WithoutCancel(ctx), d, "requeue", func() error { return d.raw.Nack(false, true) })
		})
	}
	return again, wait
}

// delivered is d's delivery count, which sets its retry backoff: the
// quorum queue's where the broker keeps one, else one more than the failed
// attempts this process counted for its event, whichever is more.
func (c *Consumer[TTx]) delivered(d *delivery) int {
	return max(d.brokerCount, c.attempts.get(d.msg.ID)+1)
}

// attempt is the number of d's delivery counted as one of its event's
// attempts: the quorum queue's delivery count less the deliveries this
// process excused (they were not attempts), or one more than the failed
// attempts this process counted, whichever is more; so at least 1, for
// this delivery is an attempt whatever the counts say.
func (c *Consumer[TTx]) attempt(d *delivery) int {
	return max(d.brokerCount-c.attempts.excused(d.msg.ID), c.attempts.get(d.msg.ID)+1)
}

// settle acknowledges d with ack on its own channel, unless that channel
// died: the broker then requeued d, and its redelivery is skipped by the
// inbox (or processed again, if it did not commit). An ack on another
// channel would name another delivery, or close that channel.
func (c *Consumer[TTx]) settle(ctx context.Context, d *delivery, what string, ack func() error) {
	if !d.settle() {
		return
	}
	if d.sess.dead.Load() {
		c.logger.InfoContext(ctx, "inboxrabbit: skipped an "+what+": the delivery's channel is gone and the broker requeued it",
			"queue", c.config.Queue, "id", d.msg.ID, "generation", d.sess.gen)
		return
	}
	if err := ack(); err != nil {
		c.logger.WarnContext(ctx, "inboxrabbit: "+what+" failed; the broker requeues the delivery when its channel closes",
			"queue", c.config.Queue, "id", d.msg.ID, "err", err)
	}
}

// deadLetter stores d in the dead-letter store. The caller nacks d only
// when it returns nil.
func (c *Consumer[TTx]) deadLetter(ctx context.Context, d *delivery, reason string, cause error, delivered int) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	msg := d.msg
	if msg.Source.BrokerID == "" {
		// With no message-id property, nothing names the delivery: name
		// the dead letter by its body, so that two messages without ids
		// do not share one.
		sum := sha256.Sum256(msg.Payload)
		msg.Source.BrokerID = "body-sha256:" + hex.EncodeToString(sum[:])
	}
	return c.client.DeadLetter(sctx, inbox.DeadLetterParams{
		Consumer: c.config.Consumer,
		Message:  msg,
		Reason:   reason,
		Err:      cause,
		Attempts: delivered,
	})
}
