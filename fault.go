package inbox

import (
	"errors"
	"fmt"
)

// Stage is the step of processing a message at which a failure happened.
// The errors the client returns carry it in a StageError, so that Judge can
// tell whose fault a failure is.
type Stage int

// The stages of processing a message.
const (
	// StageKey is the KeyFunc that reads the message's id
	// (Client.Key).
	StageKey Stage = iota + 1
	// StageClaim is the transaction's begin and claim, and the lookup that
	// precedes a pipelined claim after a duplicate.
	StageClaim
	// StageHandler is the handler: its own errors and those of its
	// statements on the transaction.
	StageHandler
	// StageCommit is the commit, or a pipelined transaction's begin, claim
	// and commit, which travel together.
	StageCommit
	// StageDeadLetter is the write of a dead letter (Client.DeadLetter).
	StageDeadLetter
	// StageLedger is a read or write of one of the inbox's ledgers: the
	// effects ledger, by Client.Effect from inside a handler, and the
	// takeover ledger (inboxtransport.Ledger), by a transport adapter.
	StageLedger
)

func (s Stage) String() string {
	switch s {
	case StageKey:
		return "key"
	case StageClaim:
		return "claim"
	case StageHandler:
		return "handler"
	case StageCommit:
		return "commit"
	case StageDeadLetter:
		return "dead-letter"
	case StageLedger:
		return "ledger"
	}
	return fmt.Sprintf("Stage(%d)", int(s))
}

// inboxWork reports whether s is the inbox's own work, whose failure is
// the store's whatever its error code.
func (s Stage) inboxWork() bool {
	return s == StageClaim || s == StageCommit || s == StageDeadLetter || s == StageLedger
}

// StageError is a failure at one stage of processing a message. The errors
// of Process, ProcessBatch, ClaimTx, Key, DeadLetter and Effect wrap one:
// find it with errors.As. Its text is its Err's.
type StageError struct {
	Stage Stage
	Err   error
}

func (e *StageError) Error() string { return e.Err.Error() }

// unprefixed lets an error of the package that wraps e say "inbox: " once.
func (e *StageError) unprefixed() string { return causeText(e.Err) }

// Unwrap returns the wrapped error.
func (e *StageError) Unwrap() error { return e.Err }

// atStage tags err with stage; nil stays nil.
func atStage(stage Stage, err error) error {
	if err == nil {
		return nil
	}
	return &StageError{Stage: stage, Err: err}
}

// Unavailable marks err, returned by a handler or a KeyFunc, as a failure
// that is not the message's: something every message needs is down, such
// as a provider that refuses every call. Transport adapters then treat it
// as they treat the store being down: not an attempt, never a reason to
// dead-letter; they pause and try again. Returning an error that wraps
// ErrUnavailable does the same. Unavailable(nil) is nil.
func Unavailable(err error) error {
	if err == nil {
		return nil
	}
	return &UnavailableError{Err: err}
}

// UnavailableError is the error Unavailable returns. It matches
// ErrUnavailable with errors.Is.
type UnavailableError struct {
	Err error
}

func (e *UnavailableError) Error() string { return "unavailable: " + e.Err.Error() }

// Unwrap returns the wrapped error.
func (e *UnavailableError) Unwrap() error { return e.Err }

// Is reports whether target is ErrUnavailable.
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }

// errConnLost marks a handler's failure after which the driver found the
// transaction's connection broken (inboxdriver.Driver.TxBroken): the store's
// fault, whatever the handler returned. It wraps ErrUnavailable.
var errConnLost = fmt.Errorf("%w: the transaction's connection broke", ErrUnavailable)

// Fault says whose fault a failure is, and so what a transport adapter does
// with the message: Judge returns it.
type Fault int

// The faults Judge tells apart.
const (
	// FaultNone is no failure: err is nil.
	FaultNone Fault = iota
	// FaultMessage is the message's own failure, which a retry may mend:
	// its handler returned an error. It counts as one of the message's
	// attempts; a message that uses up its attempts is dead-lettered with
	// ReasonMaxAttempts.
	FaultMessage
	// FaultPermanent is the message's failure that no retry can mend: no
	// id, a malformed id (whatever a KeyFunc returned), a Permanent handler
	// error, an unknown outcome. It is dead-lettered at once.
	FaultPermanent
	// FaultStore is the store's failure: the inbox's own work failed
	// (begin, claim, commit, the dead-letter write, a ledger), whatever
	// its error code (permission denied, read-only, a missing table, a
	// refused connection), or the connection of the message's transaction
	// broke under its handler. The same failure would hit every message: it
	// is never an attempt and never a reason to dead-letter. Pause and try
	// again.
	FaultStore
	// FaultSystemic is a failure the handler or KeyFunc marked as not the
	// message's (Unavailable, or an error wrapping ErrUnavailable). It is
	// treated as FaultStore.
	FaultSystemic
	// FaultContention is a claim that waited longer than
	// Config.LockTimeout for a lock (ErrLockTimeout), usually behind
	// another delivery of the same id, or ErrNotAttempted: nothing is known
	// about the message. Not an attempt; try again after a backoff.
	FaultContention
)

func (f Fault) String() string {
	switch f {
	case FaultNone:
		return "none"
	case FaultMessage:
		return "message"
	case FaultPermanent:
		return "permanent"
	case FaultStore:
		return "store"
	case FaultSystemic:
		return "systemic"
	case FaultContention:
		return "contention"
	}
	return fmt.Sprintf("Fault(%d)", int(f))
}

// Attempt reports whether a failure of this kind counts as one of the
// message's attempts.
func (f Fault) Attempt() bool { return f == FaultMessage }

// Judge says whose fault err is, for a message that failed with it. The
// rule, in order:
//
//   - a failure of the inbox's own work (a StageError of StageClaim,
//     StageCommit, StageDeadLetter or StageLedger, anywhere in err) is
//     FaultStore, whatever its code, except a claim's ErrLockTimeout,
//     which is FaultContention;
//   - a handler's failure after which its transaction's connection was
//     found broken is FaultStore;
//   - an error that wraps ErrUnavailable is FaultSystemic when a handler
//     or KeyFunc returned it (marked with Unavailable), and FaultStore
//     otherwise;
//   - a permanent error (IsPermanent) is FaultPermanent;
//   - ErrNotAttempted, and an ErrLockTimeout from no stage, is
//     FaultContention;
//   - anything else, including a handler's io.EOF or net.Error from its
//     own parsing or calls, is FaultMessage.
//
// Transport adapters decide with it through inboxtransport, so that they cannot
// judge a failure differently.
func Judge(err error) Fault {
	if err == nil {
		return FaultNone
	}
	first, store := stagesOf(err)
	switch {
	case store != 0:
		if store == StageClaim && errors.Is(err, ErrLockTimeout) {
			return FaultContention
		}
		return FaultStore
	case errors.Is(err, errConnLost):
		return FaultStore
	case errors.Is(err, ErrUnavailable):
		if first == StageHandler || first == StageKey {
			return FaultSystemic
		}
		return FaultStore
	case IsPermanent(err):
		return FaultPermanent
	case errors.Is(err, ErrNotAttempted):
		return FaultContention
	case first == 0 && errors.Is(err, ErrLockTimeout):
		return FaultContention
	}
	return FaultMessage
}

// stagesOf returns the stage of the outermost StageError in err, and the
// stage of the outermost one that is the inbox's own work, if any: a
// handler that returns the error of Client.Effect's ledger write carries
// both.
func stagesOf(err error) (first, store Stage) {
	var walk func(err error, depth int)
	walk = func(err error, depth int) {
		if err == nil || depth > 100 || store != 0 {
			return
		}
		if se, ok := err.(*StageError); ok {
			if first == 0 {
				first = se.Stage
			}
			if se.Stage.inboxWork() {
				store = se.Stage
				return
			}
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			walk(u.Unwrap(), depth+1)
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				walk(e, depth+1)
			}
		}
	}
	walk(err, 0)
	return first, store
}
