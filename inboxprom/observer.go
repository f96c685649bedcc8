package inboxprom

import (
	"context"
	"errors"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/outbox"
)

// TxStart returns ctx: the metrics need nothing from the start.
func (o *Observer) TxStart(ctx context.Context, consumer string, msgs []inbox.Message) context.Context {
	return ctx
}

// TxEnd counts the transaction's messages by outcome, its duplicates by
// reason, its failure, and observes its phases.
func (o *Observer) TxEnd(ctx context.Context, e *inbox.TxEvent) {
	m := o.of(e.Consumer)
	m.claim.Observe(e.Claim.Seconds())
	m.handler.Observe(e.Handler.Seconds())
	m.commit.Observe(e.Commit.Seconds())
	if e.Err != nil {
		m.failed.Add(float64(e.Messages))
		o.failures.WithLabelValues(e.Consumer, inbox.Judge(e.Err).String()).Inc()
		switch {
		case errors.Is(e.Err, inbox.ErrConflict):
			m.conflicts.Inc()
		case errors.Is(e.Err, inbox.ErrLockTimeout):
			m.lockTimeouts.Inc()
		}
		return
	}
	if e.Applied > 0 {
		m.applied.Add(float64(e.Applied))
	}
	if e.Duplicates > 0 {
		m.duplicate.Add(float64(e.Duplicates))
		if e.Redelivered > 0 {
			m.redelivery.Add(float64(e.Redelivered))
		}
		if e.Republished > 0 {
			m.republish.Add(float64(e.Republished))
		}
		if e.Concurrent > 0 {
			m.concurrent.Add(float64(e.Concurrent))
		}
	}
}

// DeadLettered counts a dead letter by reason.
func (o *Observer) DeadLettered(ctx context.Context, e *inbox.DeadLetterEvent) {
	o.deadLettered.WithLabelValues(e.Consumer, DeadLetterReason(e.Reason)).Inc()
	o.messages.WithLabelValues(e.Consumer, "dead_lettered").Inc()
}

// DeadLetterReason bounds a dead letter's reason to the codes package
// inbox defines (inbox.KnownReason), and "other": a reason of the
// caller's own is not a label.
func DeadLetterReason(r string) string {
	if inbox.KnownReason(r) {
		return r
	}
	return "other"
}

// Claimed observes a relay's claim.
func (o *Observer) Claimed(ctx context.Context, e *outbox.ClaimEvent) {
	o.relayClaim.Observe(e.Duration.Seconds())
}

// Published counts a batch's events by result, and observes its time and
// lag.
func (o *Observer) Published(ctx context.Context, e *outbox.PublishEvent) {
	if e.Confirmed > 0 {
		o.published.WithLabelValues("ok").Add(float64(e.Confirmed))
		o.lag.Observe(e.MaxAge.Seconds())
	}
	if e.Rejected > 0 {
		o.published.WithLabelValues("rejected").Add(float64(e.Rejected))
	}
	if e.Unavailable > 0 {
		o.published.WithLabelValues("unavailable").Add(float64(e.Unavailable))
	}
	o.publish.Observe(e.Duration.Seconds())
}

// Parked counts a parked event.
func (o *Observer) Parked(ctx context.Context, e *outbox.ParkEvent) { o.parked.Inc() }
