package inboxsqs

import (
	"errors"
	"time"

	"github.com/txinbox/inbox"
)

// action is what becomes of a delivery after processing.
type action uint8

const (
	// actDelete: its transaction committed (applied or duplicate). Delete.
	actDelete action = iota + 1
	// actDeadLetter: it will never be applied. Store it in the dead-letter
	// store (and the dead-letter queue), then delete.
	actDeadLetter
	// actRetry: it failed and may succeed later. Set a backoff visibility.
	actRetry
	// actRelease: its processing was cancelled by shutdown. Make it
	// visible again at once for another consumer.
	actRelease
	// actRequeue: it was not attempted because an earlier message of its
	// group failed. Hold it for the group's next run, or release it with
	// the group.
	actRequeue
)

func (a action) String() string {
	switch a {
	case actDelete:
		return "delete"
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
// its receives-th receive. cancelled tells that the processing context was
// cancelled (shutdown), which says nothing about the message. It returns
// the dead-letter reason with actDeadLetter.
func decide(err error, receives, maxReceives int, cancelled bool) (action, string) {
	switch {
	case err == nil:
		return actDelete, ""
	case errors.Is(err, inbox.ErrNotAttempted):
		return actRequeue, ""
	case cancelled:
		return actRelease, ""
	case inbox.IsPermanent(err):
		return actDeadLetter, inbox.DeadLetterReason(err)
	case notPoison(err):
		return actRetry, ""
	case receives >= maxReceives:
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

// retryDelay is the visibility timeout of a message that failed on its
// receives-th receive: base doubled per earlier receive, capped, in whole
// seconds and at least one.
func retryDelay(base, maxDelay time.Duration, receives int) time.Duration {
	d := base
	for i := 1; i < receives && d > 0 && d < maxDelay; i++ {
		d *= 2
	}
	return ceilSeconds(min(d, maxDelay))
}

// ceilSeconds rounds d up to whole seconds, at least one: SQS counts
// visibility in seconds, and 0 would make a message visible at once.
func ceilSeconds(d time.Duration) time.Duration {
	s := (d + time.Second - 1) / time.Second
	return max(s, 1) * time.Second
}
