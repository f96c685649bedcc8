package inboxrabbit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxtransport"
	"github.com/txinbox/inbox/internal/fault"
)

// process processes a batch of deliveries through the inbox's shared
// delivery policy, as one batch (in order when Ordered), and settles each:
// ack what committed, Nack without requeue what was dead-lettered, hold
// and then requeue what may succeed later, requeue what an ordered batch
// did not reach, and leave what shutdown cancelled to the closing channel.
// When Ordered, it returns what may succeed later instead, with the
// backoff to wait, for the worker to try again in place: a requeued
// delivery goes to the back of a quorum queue.
func (c *Consumer[TTx]) process(ctx context.Context, ds []*delivery) (again []*delivery, wait time.Duration) {
	ss := c.policy.Process(ctx, ds, c.config.Ordered)
	for _, s := range ss {
		if s.Verdict == inboxtransport.Ack || s.Verdict == inboxtransport.DeadLettered {
			// The messages are in the database (or the dead-letter
			// store); the broker does not know yet.
			fault.Inject(ctx, fault.AfterCommitBeforeAck)
			break
		}
	}
	for i, s := range ss {
		d := ds[i]
		switch s.Verdict {
		case inboxtransport.Ack:
			c.settle(ctx, d, "ack", func() error { return d.raw.Ack(false) })
		case inboxtransport.DeadLettered:
			// A dead-letter exchange on the queue gets it too.
			c.settle(ctx, d, "nack", func() error { return d.raw.Nack(false, false) })
		case inboxtransport.Requeue:
			c.settle(ctx, d, "requeue", func() error { return d.raw.Nack(false, true) })
		case inboxtransport.Retry:
			if c.config.Ordered {
				// Tried again in place: the broker does not count it.
				again = append(again, d)
				wait = max(wait, s.Delay)
				continue
			}
			d.sess.later(s.Delay, func() {
				c.settle(context.WithoutCancel(ctx), d, "requeue", func() error { return d.raw.Nack(false, true) })
			})
		case inboxtransport.Release:
			// Left unacknowledged: Run closes the channel, which
			// requeues it.
		}
	}
	return again, wait
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
			"queue", c.config.Queue, "id", d.tr.Message.ID, "generation", d.sess.gen)
		return
	}
	if err := ack(); err != nil {
		c.logger.WarnContext(ctx, "inboxrabbit: "+what+" failed; the broker requeues the delivery when its channel closes",
			"queue", c.config.Queue, "id", d.tr.Message.ID, "err", err)
	}
}

// deadLetter names a dead letter whose message has no message-id property
// by its body, so that two messages without ids do not share one, and
// stores it.
func deadLetter(_ context.Context, _ *delivery, p *inbox.DeadLetterParams, store func(*inbox.DeadLetterParams) error) error {
	if p.Message.Source.BrokerID == "" {
		sum := sha256.Sum256(p.Message.Payload)
		p.Message.Source.BrokerID = "body-sha256:" + hex.EncodeToString(sum[:])
	}
	return store(p)
}
