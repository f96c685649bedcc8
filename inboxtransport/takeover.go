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
