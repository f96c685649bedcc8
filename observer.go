package inbox

import (
	"context"
	"time"
)

// Observer watches the client's transactions and dead letters, for metrics,
// traces and logs. Set it in Config.Observer. Metrics and tracing adapters
// implement it outside this package, so that the root imports nothing but
// the standard library.
//
// The client calls it from the goroutines that process messages: it must be
// safe for concurrent use, and quick. A nil Observer costs nothing.
type Observer interface {
	// TxStart is called before a transaction of Process or ProcessBatch
	// begins, with its messages. The context it returns is used for the
	// claim, the handlers and the commit: a tracer starts a span here,
	// continuing the trace context carried in the messages' headers.
	TxStart(ctx context.Context, consumer string, msgs []Message) context.Context
	// TxEnd is called when the transaction has committed, rolled back, or
	// failed, with the context TxStart returned.
	TxEnd(ctx context.Context, e *TxEvent)
	// DeadLettered is called after a message was stored as a dead letter.
	DeadLettered(ctx context.Context, e *DeadLetterEvent)
}

// TxEvent describes one transaction attempt. A transaction retried after a
// conflict is two events.
type TxEvent struct {
	Consumer string
	// Messages is the number of messages the transaction claimed: 1 for
	// Process.
	Messages int
	// Applied and Duplicates count the messages with each outcome. Both are
	// zero when Err is set: nothing was applied.
	Applied    int
	Duplicates int
	// Redelivered, Republished and Concurrent split Duplicates by reason
	// (see DuplicateReason); they sum to Duplicates.
	Redelivered int
	Republished int
	Concurrent  int
	// Err is the error that ended the transaction, if any.
	Err error
	// Claim is the time to begin and claim, Handler the time spent in
	// handlers, and Commit the time to commit.
	Claim   time.Duration
	Handler time.Duration
	Commit  time.Duration
}

// DuplicateReason says why a message was a Duplicate.
type DuplicateReason uint8

const (
	// DuplicateRepublish: the broker delivered the message for the first
	// time, yet its id was already applied: the producer (or its relay)
	// published the event again.
	DuplicateRepublish DuplicateReason = iota + 1
	// DuplicateRedelivery: the broker delivered the message again, so an
	// earlier delivery was applied and its ack was lost.
	DuplicateRedelivery
	// DuplicateConcurrent: another copy of the message was being claimed at
	// the same time, and this one waited for it to commit.
	DuplicateConcurrent
)

func (r DuplicateReason) String() string {
	switch r {
	case DuplicateRepublish:
		return "republish"
	case DuplicateRedelivery:
		return "redelivery"
	case DuplicateConcurrent:
		return "concurrent"
	default:
		return "unknown"
	}
}

// duplicateReason is why msg, found a Duplicate, was one. concurrent
// reports that its claim waited for another copy in flight.
func duplicateReason(msg *Message, concurrent bool) DuplicateReason {
	switch {
	case concurrent:
		return DuplicateConcurrent
	case msg.Source.Redelivered || msg.Source.Attempt > 1:
		return DuplicateRedelivery
	default:
		return DuplicateRepublish
	}
}

// DeadLetterEvent describes a message stored as a dead letter.
type DeadLetterEvent struct {
	Consumer  string
	MessageID string
	Reason    string
	Attempts  int
	Err       error
}

// txObservation times one transaction for the Observer. Its methods do
// nothing when the client has no observer.
type txObservation struct {
	obs   Observer
	msgs  []Message
	ev    TxEvent
	mark  time.Time
	ended bool
}

func (c *Client[TTx]) observeTx(ctx context.Context, consumer string, msgs []Message) (context.Context, *txObservation) {
	if c.config.Observer == nil {
		return ctx, nil
	}
	o := &txObservation{obs: c.config.Observer, msgs: msgs, ev: TxEvent{Consumer: consumer, Messages: len(msgs)}}
	ctx = o.obs.TxStart(ctx, consumer, msgs)
	o.mark = time.Now()
	return ctx, o
}

// The phases of a transaction that TxEvent times.
const (
	phaseClaim = iota
	phaseHandler
	phaseCommit
)

// lap adds the time since the last lap to the phase's duration.
func (o *txObservation) lap(phase int) {
	if o == nil {
		return
	}
	now := time.Now()
	d := now.Sub(o.mark)
	o.mark = now
	switch phase {
	case phaseClaim:
		o.ev.Claim += d
	case phaseHandler:
		o.ev.Handler += d
	case phaseCommit:
		o.ev.Commit += d
	}
}

// end reports the transaction's outcome, once. concurrent says that its
// claim followed a conflict: its duplicates were in flight then.
func (o *txObservation) end(ctx context.Context, outcomes []Outcome, concurrent bool, err error) {
	if o == nil || o.ended {
		return
	}
	o.ended = true
	o.ev.Err = err
	if err == nil {
		for i, out := range outcomes {
			switch out {
			case Applied:
				o.ev.Applied++
			case Duplicate:
				o.ev.Duplicates++
				if i < len(o.msgs) {
					switch duplicateReason(&o.msgs[i], concurrent) {
					case DuplicateRedelivery:
						o.ev.Redelivered++
					case DuplicateConcurrent:
						o.ev.Concurrent++
					default:
						o.ev.Republished++
					}
				}
			}
		}
	}
	o.obs.TxEnd(ctx, &o.ev)
}
