package inboxnats

import (
	"context"
	"time"

	"github.com/txinbox/inbox/inboxtransport"
	"github.com/txinbox/inbox/internal/fault"
)

// newPolicy returns the consumer's delivery policy, with the MaxDeliver
// Run resolved.
func (c *Consumer[TTx]) newPolicy() (*inboxtransport.Policy[TTx, *delivery], error) {
	return inboxtransport.NewPolicy(inboxtransport.Config[TTx, *delivery]{
		Client:          c.client,
		Handler:         c.handler,
		Consumer:        c.config.Consumer,
		Key:             c.config.Key,
		MaxAttempts:     c.maxDeliver,
		RetryBackoff:    c.config.RetryBackoff,
		MaxRetryBackoff: c.config.MaxRetryBackoff,
		Name:            "inboxnats",
		Logger:          c.logger,
		Breaker:         c.breaker,
	})
}

// process processes a fetched batch through the inbox's shared delivery
// policy, as one batch (in order when Ordered), and settles each message:
// ack what committed, terminate what was dead-lettered, NakWithDelay what
// may succeed later, release what shutdown cancelled or an ordered batch
// did not reach.
func (c *Consumer[TTx]) process(ctx context.Context, ds []*delivery) {
	for _, d := range ds {
		// On the last delivery that the JetStream consumer's own
		// MaxDeliver allows, a failure of its own must dead-letter the
		// message now: the server will not deliver it again.
		d.tr.Last = c.serverMaxDeliver > 0 && d.delivered >= c.serverMaxDeliver
	}
	ss := c.policy.Process(ctx, ds, c.config.Ordered)
	settled := false
	var release []*delivery
	for i, s := range ss {
		d := ds[i]
		switch s.Verdict {
		case inboxtransport.Ack, inboxtransport.DeadLettered:
			if !settled {
				// The messages are in the database (or the dead-letter
				// store); the broker does not know yet.
				fault.Inject(ctx, fault.AfterCommitBeforeAck)
				settled = true
			}
			if s.Verdict == inboxtransport.Ack {
				c.ack(ctx, d)
			} else {
				c.term(ctx, d, s.Reason)
			}
		case inboxtransport.Retry:
			c.nak(ctx, d, s.Delay)
		default:
			release = append(release, d)
		}
	}
	c.release(ctx, release)
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
			"stream", c.config.Stream, "sequence", d.tr.Message.Source.Offset, "err", err)
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
			"stream", c.config.Stream, "sequence", d.tr.Message.Source.Offset, "err", err)
	}
}

// nak asks for d to be delivered again after delay.
func (c *Consumer[TTx]) nak(ctx context.Context, d *delivery, delay time.Duration) {
	if !c.settle(d) {
		return
	}
	if err := d.raw.NakWithDelay(delay); err != nil {
		c.logger.WarnContext(ctx, "inboxnats: nak failed; the message comes back when its AckWait runs out",
			"stream", c.config.Stream, "sequence", d.tr.Message.Source.Offset, "err", err)
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
				"stream", c.config.Stream, "sequence", d.tr.Message.Source.Offset, "err", err)
		}
	}
}

// settle marks d settled and stops its heartbeat. It reports whether d was
// still unsettled.
func (c *Consumer[TTx]) settle(d *delivery) bool {
	c.leases.Remove(d)
	return d.settle()
}

// settleContext returns a context for a call that settles a message: it
// keeps ctx's values, outlives its cancellation, and is bounded.
func settleContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
}
