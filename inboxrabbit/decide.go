package inboxrabbit

import (
	"errors"
	"time"

	"github.com/txinbox/inbox"
)

// This file is the whole of the adapter's failure judgement: what becomes
// of a message after the inbox processed it. It mirrors inboxsqs's, so
// that both can give way to one shared policy.

// action is what becomes of a delivery after processing.
type action uint8

const (
	// actAck: its transaction committed (applied or duplicate). Ack.
	actAck action = iota + 1
	// actDeadLetter: it will never be applied. Store it in the dead-letter
	// store, then Nack it without requeue, so that a dead-letter exchange
	// sees it too.
	actDeadLetter
	// actRetry: it failed and may succeed later. Hold it for a backoff,
	// then Nack it with requeue.
	actRetry
	// actRelease: its processing was cancelled by shutdown. Leave it to
	// the closing channel, which requeues it.
	actRelease
	// actRequeue: it was not attempted because an earlier message of its
	// ordered batch failed. Requeue it at once.
	actRequeue
)

func (a action) String() string {
	switch a {
	case actAck:
		return "ack"
	case actDeadLetter:
		return "dead-letter"
	case actRetry:
		return "retry"
	case actRelease:
		return "release"
	case actRequeue:
		return "requeue"
	}
	return "action(?)"
}

// decide says what to do with a delivery whose processing returned err, on
// its delivered-th delivery (see delivery.count). cancelled tells that the
// processing context was cancelled (shutdown), which says nothing about the
// message. It returns the dead-letter reason with actDeadLetter.
func decide(err error, delivered, maxDeliver int, cancelled bool) (action, string) {
	switch {
	case err == nil:
		return actAck, ""
	case errors.Is(err, inbox.ErrNotAttempted):
		return actRequeue, ""
	case cancelled:
		return actRelease, ""
	case inbox.IsPermanent(err):
		return actDeadLetter, inbox.DeadLetterReason(err)
	case notPoison(err):
		return actRetry, ""
	case delivered >= maxDeliver:
		return actDeadLetter, inbox.ReasonMaxAttempts
	default:
		return actRetry, ""
	}
}

// notPoison reports whether err is a failure that says nothing about the
// message itself, so that it never counts towards dead-lettering: the store
// is unreachable, or a concurrent delivery of the same event held the claim.
func notPoison(err error) bool {
	return errors.Is(err, inbox.ErrUnavailable) || errors.Is(err, inbox.ErrLockTimeout)
}

// retryDelay is how long a delivery that failed on its delivered-th
// delivery is held before it is requeued: base doubled per earlier delivery, capped.
func retryDelay(base, maxDelay time.Duration, delivered int) time.Duration {
	d := base
	for i := 1; i < delivered && d > 0 && d < maxDelay; i++ {
		d *= 2
	}
	return min(d, maxDelay)
}
