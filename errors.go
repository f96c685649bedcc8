package inbox

import (
	"errors"
	"fmt"

	"github.com/txinbox/inbox/inboxdriver"
)

// Sentinel errors. Test for them with errors.Is: the errors the client
// returns wrap them with the consumer, the id and the cause. A sentinel's
// text is its meaning alone ("message has no id"), as river's and pgx's
// are; the error that wraps it says "inbox: " once, at the front.
var (
	// ErrNoMessageID is returned by a KeyFunc, Process, ClaimTx and
	// ProcessBatch when a message carries no id, or an empty one. Such a
	// message is never applied: adapters dead-letter it.
	ErrNoMessageID = errors.New("message has no id")

	// ErrMalformedID is returned when a message's id is not valid for the
	// configured IDFormat, or a KeyFunc cannot read it (a payload that is
	// not JSON, a field that is not a string). Such a message is never
	// applied: adapters dead-letter it.
	ErrMalformedID = errors.New("malformed message id")

	// ErrInvalidConsumer is returned, before any SQL runs, when a consumer
	// name is empty, longer than MaxConsumerLen bytes, not printable UTF-8,
	// or has surrounding white space.
	ErrInvalidConsumer = errors.New("invalid consumer name")

	// ErrNotFound is returned by Forget and the dead-letter lookups when
	// there is no such row.
	ErrNotFound = inboxdriver.ErrNotFound

	// ErrWindowTooShort is returned by Purge and RunCleaner when asked to
	// delete rows younger than Config.ReplayHorizon: inside that horizon a
	// replayed message would look new and be applied again.
	ErrWindowTooShort = errors.New("purge window is shorter than the replay horizon")

	// ErrLockTimeout is returned when a claim waited longer than
	// Config.LockTimeout for a lock: most often behind an uncommitted
	// delivery of the same message in another transaction, or behind a lock
	// on the whole inbox table (a migration, VACUUM FULL, LOCK TABLE). It is
	// retryable: by then the other delivery has usually committed, and the
	// retry is a Duplicate.
	ErrLockTimeout = errors.New("claim timed out waiting for a lock")

	// ErrConflict is returned when a transaction still failed with a
	// serialization failure or a deadlock after Config.MaxConflictRetries
	// retries. It is retryable.
	ErrConflict = errors.New("serialization failure or deadlock")

	// ErrUnavailable is returned when the store cannot be reached, or a
	// connection broke. It is retryable and never a reason to dead-letter.
	// When it comes from a commit, the commit's outcome is unknown: do not
	// ack, and let the redelivery find out. A handler may wrap it, or use
	// Unavailable, to say its failure is not the message's.
	ErrUnavailable = errors.New("store unavailable")

	// ErrPermissionDenied is returned when the store refused a statement
	// for want of a privilege: RunCleaner returns it when its role may not
	// DELETE from the inbox (see docs/GRANTS.md).
	ErrPermissionDenied = errors.New("permission denied")

	// ErrNotMigrated is returned when a table or column that the store
	// needs does not exist: the tables are missing, or not migrated to the
	// version this release needs (run 'inbox migrate up', or
	// inboxmigrate). The operations of Admin and package outbox return it;
	// a consumer's claim on such a store is the store's failure, never the
	// message's.
	ErrNotMigrated = errors.New("the inbox tables are missing or not migrated")

	// ErrUnknownOutcome is returned by Client.Effect for a step declared
	// NonIdempotent whose earlier attempt was recorded started but never
	// done: the process died during or after the call, and whether the
	// provider applied it cannot be known from here. Effect does not guess
	// and does not call again. The error is permanent: adapters dead-letter
	// the message at once with ReasonUnknownOutcome, for a human to check
	// with the provider, settle the step with Admin.EffectResolve and
	// replay the dead letter.
	ErrUnknownOutcome = errors.New("outcome of a non-idempotent remote call is unknown")

	// ErrInvalidStep is returned by Client.Effect, before any SQL runs, when
	// a step name is empty, longer than MaxStepLen bytes, not printable
	// UTF-8, or has surrounding white space.
	ErrInvalidStep = errors.New("invalid effect step name")

	// ErrEffectsUnsupported is returned by Client.Effect and the other
	// effect-ledger methods when the client's driver keeps no effects ledger
	// (it does not implement inboxdriver.EffectStore).
	ErrEffectsUnsupported = errors.New("the store keeps no effects ledger")
)

// Permanent marks err as a failure that retrying cannot fix, such as a
// message that fails validation. Adapters dead-letter a message whose
// handler returns a permanent error at once, without using up its attempts.
// Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// PermanentError is the error Permanent returns.
type PermanentError struct {
	Err error
}

func (e *PermanentError) Error() string { return "permanent: " + e.Err.Error() }

// Unwrap returns the wrapped error.
func (e *PermanentError) Unwrap() error { return e.Err }

// IsPermanent reports whether err, or an error it wraps, was marked with
// Permanent, says that the message has no usable id, or is an
// ErrUnknownOutcome that needs a human. Retrying such a message cannot
// succeed.
func IsPermanent(err error) bool {
	var pe *PermanentError
	return errors.As(err, &pe) ||
		errors.Is(err, ErrNoMessageID) ||
		errors.Is(err, ErrMalformedID) ||
		errors.Is(err, ErrUnknownOutcome)
}

// IsRetryable reports whether a message that failed with err may succeed
// when it is delivered again. It is false for nil, for permanent errors and
// for an invalid consumer or step name. A cancelled context is retryable: the
// message was not applied, and its redelivery may be.
func IsRetryable(err error) bool {
	if err == nil || IsPermanent(err) || errors.Is(err, ErrInvalidConsumer) || errors.Is(err, ErrInvalidStep) {
		return false
	}
	return true
}

// PanicError is returned when a handler panics. The transaction is rolled
// back and the panic does not escape the client. It is retryable, so a
// handler that panics on every delivery uses up its attempts and is then
// dead-lettered.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("handler panicked: %v", e.Value) }

// marked wraps err with a sentinel, for errors.Is: "store unavailable: dial
// tcp …".
func marked(sentinel, err error) error {
	return &markedError{sentinel: sentinel, err: err}
}

type markedError struct{ sentinel, err error }

func (e *markedError) Error() string   { return e.sentinel.Error() + ": " + e.err.Error() }
func (e *markedError) Unwrap() []error { return []error{e.sentinel, e.err} }

// prefixed is an error of this package whose text starts "inbox: ". An
// error of the package that wraps one words it by the rest of its text, so
// that "inbox: " is said once, however deep the wrapping.
type prefixed interface {
	error
	unprefixed() string
}

// causeText is err's text as the cause in an error of this package.
func causeText(err error) string {
	if p, ok := err.(prefixed); ok {
		return p.unprefixed()
	}
	return err.Error()
}

// opError is an operation of this package that failed: "inbox: " what was
// done, then the cause.
type opError struct {
	what string
	err  error
}

// wrapf returns err as the cause of the operation that format and args
// name: "inbox: replay dead letter 7: " and err's text without a second
// "inbox: ".
func wrapf(err error, format string, args ...any) error {
	return &opError{what: fmt.Sprintf(format, args...), err: err}
}

func (e *opError) Error() string      { return "inbox: " + e.unprefixed() }
func (e *opError) unprefixed() string { return e.what + ": " + causeText(e.err) }
func (e *opError) Unwrap() error      { return e.err }
