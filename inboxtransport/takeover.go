package inboxtransport

import (
	"context"
	"errors"
	"fmt"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
)

// Takeover is what the takeover ledger knew when a consumer took over a
// source.
type Takeover struct {
	// Count is how many takeovers in a row found the same message first
	// after an owner had started it (Ledger.Start) and gone down before
	// getting past it, plus one: 1 for a message that never took an owner
	// down.
	Count int
	// Crashed reports that the owner before did not stop cleanly: it died
	// while it held the source, somewhere at or after the position it had
	// recorded.
	Crashed bool
}

// ledgerStore is the part of the store a Ledger uses.
type ledgerStore interface {
	Takeover(ctx context.Context, p *inboxdriver.TakeoverParams) (n int, existed bool, err error)
	TakeoverStart(ctx context.Context, p *inboxdriver.TakeoverParams) error
	TakeoverDone(ctx context.Context, p *inboxdriver.TakeoverParams) error
	Classify(err error) inboxdriver.ErrorClass
}

// Ledger is a consumer's takeover ledger: how a transport whose broker does
// not count deliveries bounds a message that crashes its consumer, with a
// few writes per takeover and none per message. A consumer that takes
// over a source (a transport's unit of ordered delivery, such as
// "kafka:orders/3") records it (Record), marks the message that a crash
// should count against before running it (Start), and clears the record
// when it stops cleanly (Done).
//
// Its errors are the inbox's own work, tagged inbox.StageLedger:
// inbox.Judge classes each as inbox.FaultStore, never a message's fault.
type Ledger struct {
	store    ledgerStore
	consumer string
}

// NewLedger returns the takeover ledger of consumer in client's store.
func NewLedger[TTx any](client *inbox.Client[TTx], consumer string) (*Ledger, error) {
	if err := inbox.ValidateConsumer(consumer); err != nil {
		return nil, err
	}
	return &Ledger{store: client.Driver(), consumer: consumer}, nil
}

// Record records, in a short transaction of its own, that the consumer
// took over source and is about to process the message at position
// first, and returns what the ledger knew.
func (l *Ledger) Record(ctx context.Context, source string, first int64) (Takeover, error) {
	n, existed, err := l.store.Takeover(ctx, l.params(source, first))
	if err != nil {
		return Takeover{}, l.failed("record the takeover of", source, err)
	}
	return Takeover{Count: n, Crashed: existed}, nil
}

// Start records that the consumer, which owns source, is about to run the
// message at position: if the process goes down from now on, the next
// takeover counts it against that message. A record at another position
// moves there, with a count of 1. A takeover that finds the record not
// started (the owner went down before running it, say because another
// source's message crashed the process) does not count.
func (l *Ledger) Start(ctx context.Context, source string, position int64) error {
	if err := l.store.TakeoverStart(ctx, l.params(source, position)); err != nil {
		return l.failed("record the start of a message of", source, err)
	}
	return nil
}

// Done clears the record of source if it is still at position: the
// consumer got past that message, or stops cleanly.
func (l *Ledger) Done(ctx context.Context, source string, position int64) error {
	if err := l.store.TakeoverDone(ctx, l.params(source, position)); err != nil {
		return l.failed("clear the takeover record of", source, err)
	}
	return nil
}

func (l *Ledger) params(source string, position int64) *inboxdriver.TakeoverParams {
	return &inboxdriver.TakeoverParams{Consumer: l.consumer, Source: source, Position: position}
}

// failed tags err, the store's, with its sentinel (as the client does)
// and StageLedger.
func (l *Ledger) failed(what, source string, err error) error {
	var sentinel error
	switch l.store.Classify(err) {
	case inboxdriver.ClassUnavailable:
		sentinel = inbox.ErrUnavailable
	case inboxdriver.ClassDenied:
		sentinel = inbox.ErrPermissionDenied
	case inboxdriver.ClassLockTimeout:
		sentinel = inbox.ErrLockTimeout
	case inboxdriver.ClassConflict:
		sentinel = inbox.ErrConflict
	}
	if sentinel != nil && !errors.Is(err, sentinel) {
		err = fmt.Errorf("%w: %w", sentinel, err)
	}
	return &inbox.StageError{Stage: inbox.StageLedger, Err: fmt.Errorf("inbox: %s %s by %s: %w", what, source, l.consumer, err)}
}

// suspect reports whether d is a suspect (Settings.MaxCrashes): the
// broker says it delivered the message before, and this process counted
// no earlier delivery of it, so its last delivery may have taken a
// process down. It returns the name of the message in the ledger: the
// loop's name and the message's Track, or its event id. A message whose
// KeyFunc finds no id is no suspect: it is dead-lettered without its
// handler running.
func (l *Loop[TTx, D]) suspect(d D) (string, bool) {
	dl := d.Delivery()
	if !dl.Message.Source.Redelivered {
		return "", false
	}
	track := dl.track()
	if track == "" {
		c := l.policy.cfg
		keyed, err := c.Client.Key(c.Key, dl.Message)
		if err != nil {
			return "", false
		}
		track = keyed.ID
	}
	if failed, excused := l.policy.counts.get(track); failed+excused > 0 {
		return "", false
	}
	return l.cfg.Name + ":" + track, true
}

// handleSuspect handles d, a suspect named source in the ledger, alone:
// it records the delivery in the ledger, which counts a crash when the
// record it finds was started; it dead-letters d once its crashes reach
// MaxCrashes (crashed); else it marks d started, handles it, and clears
// the record once its transaction has ended, for this process got past
// it, and before d is settled, so that no record outlives its message at
// the broker. Suspects run one at a time, so that a crash is counted
// against the suspect that caused it. When the ledger cannot be written,
// the store is failing: d is handled unmarked, and its claim meets the
// failure.
func (l *Loop[TTx, D]) handleSuspect(ctx context.Context, src Source[D], d D, source string) Handled[D] {
	l.suspects.Lock()
	defer l.suspects.Unlock()
	tk, err := l.ledger.Record(ctx, source, 0)
	if err == nil {
		if crashes := tk.Count - 1; crashes >= l.cfg.MaxCrashes {
			return l.crashed(ctx, src, d, source, crashes)
		}
		err = l.ledger.Start(ctx, source, 0)
	}
	if err != nil {
		l.policy.logger.DebugContext(ctx, l.cfg.Name+": could not mark a redelivered message in the takeover ledger; handling it unmarked",
			"source", d.Delivery().Message.Source.String(), "err", err)
		return l.handle(ctx, src, []D{d}, nil)
	}
	return l.handle(ctx, src, []D{d}, func() { l.clear(ctx, source) })
}

// crashed settles d, which has taken crashes consumers down in a row
// (DeadLetterCrashed): it acknowledges d when the inbox holds it, and
// rejects it once it is dead-lettered; then it clears d's record. A
// failure of the store hands d back after RetryBackoff, as no attempt,
// and keeps its record.
func (l *Loop[TTx, D]) crashed(ctx context.Context, src Source[D], d D, source string, crashes int) Handled[D] {
	dl := d.Delivery()
	applied, err := l.DeadLetterCrashed(ctx, d, crashes)
	if err != nil {
		l.policy.counts.excuse(dl.track())
		l.policy.breaker.Decide(ctx, dl.Message, err, 0, 0)
		l.policy.logger.DebugContext(ctx, l.cfg.Name+": could not settle a message that crashes its consumer; it will be retried",
			"source", dl.Message.Source.String(), "err", err)
		l.RetryAfter(ctx, src, d, l.cfg.RetryBackoff)
		return Handled[D]{Retried: true, Wait: l.cfg.RetryBackoff}
	}
	l.policy.counts.forget(dl.track())
	if l.settle(d) {
		if applied {
			src.Ack(ctx, []D{d})
		} else {
			src.Reject(ctx, d, inbox.ReasonCrashedConsumer)
		}
	}
	// Cleared only once d is settled: a process that dies before that
	// must find the record, and the count, when d comes back, or it would
	// run d again. One that dies between the two leaves the record of a
	// message that is gone, which counts nothing.
	l.clear(ctx, source)
	return Handled[D]{Done: 1}
}

// DeadLetterCrashed stores d's message, which has taken crashes consumers
// down in a row, as a dead letter with inbox.ReasonCrashedConsumer,
// without running its handler, and reports it to OnResult. It keys the
// message first; when the inbox already holds it, a consumer went down
// after its commit and the message crashed nothing: it reports a
// duplicate and returns true, for the caller to acknowledge. An error is
// the store's; the caller settles nothing, and calls again later. A
// transport's own crash bound (Kafka's takeovers) calls it too.
func (l *Loop[TTx, D]) DeadLetterCrashed(ctx context.Context, d D, crashes int) (applied bool, err error) {
	dl := d.Delivery()
	c := l.policy.cfg
	if keyed, err := c.Client.Key(c.Key, dl.Message); err == nil {
		dl.Message = keyed
		if applied, err = l.appliedBefore(ctx, keyed); err != nil || applied {
			if applied {
				l.Report(Result{Message: keyed, Outcome: inbox.Duplicate})
			}
			return applied, err
		}
	}
	cause := fmt.Errorf("%s: the message took its consumer down %d times in a row, and no consumer got past it", l.cfg.Name, crashes)
	if err := l.policy.DeadLetter(ctx, d, inbox.ReasonCrashedConsumer, cause, crashes); err != nil {
		return false, err
	}
	l.policy.logger.ErrorContext(ctx, l.cfg.Name+": dead-lettered a message that crashes its consumer, without running its handler",
		"source", dl.Message.Source.String(), "id", dl.Message.ID, "crashes", crashes)
	l.Report(Result{Message: dl.Message, Err: cause, Fault: inbox.Judge(cause), Attempts: crashes, DeadLettered: true, Reason: inbox.ReasonCrashedConsumer})
	return false, nil
}

// clear clears the ledger's record of source, even once ctx is done: a
// record left behind counts this process's clean pass as a crash.
func (l *Loop[TTx, D]) clear(ctx context.Context, source string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	if err := l.ledger.Done(ctx, source, 0); err != nil {
		l.policy.logger.WarnContext(ctx, l.cfg.Name+": could not clear a message's record in the takeover ledger; its next delivery counts a crash", "ledger", source, "err", err)
	}
}

// errNotRun is what appliedBefore's handler returns: it never runs the
// consumer's handler.
var errNotRun = errors.New("inboxtransport: the handler of a message that crashed its consumer is not run")

// appliedBefore reports whether the inbox already holds msg, which is
// keyed: it claims msg's id and rolls back, never running the handler.
func (l *Loop[TTx, D]) appliedBefore(ctx context.Context, msg inbox.Message) (bool, error) {
	c := l.policy.cfg
	out, err := c.Client.Process(ctx, c.Consumer, msg, inbox.HandlerFunc[TTx](func(context.Context, TTx, inbox.Message) error {
		return errNotRun
	}))
	switch {
	case err == nil:
		return out == inbox.Duplicate, nil
	case errors.Is(err, errNotRun):
		return false, nil
	}
	return false, err
}
