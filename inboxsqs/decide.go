package inboxsqs

import (
	"context"
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

// decide says what to do with a delivery whose processing returned err,
// after attempt attempts of its own (its receive count, less the receives
// that were not attempts). cancelled tells that the processing context was
// cancelled (shutdown), which says nothing about the message. The rule of
// whose fault a failure is, and of when a message has used up its
// attempts, is the Breaker's, which every transport adapter shares; with
// actDeadLetter, the Decision carries the reason.
func decide(ctx context.Context, b *inbox.Breaker, msg inbox.Message, err error, attempt, maxReceives int, cancelled bool) (action, inbox.Decision) {
	switch {
	case err == nil:
		return actDelete, inbox.Decision{}
	case errors.Is(err, inbox.ErrNotAttempted):
		return actRequeue, inbox.Decision{}
	case cancelled:
		return actRelease, inbox.Decision{}
	}
	d := b.Decide(ctx, msg, err, attempt, maxReceives)
	if d.Action == inbox.ActionDeadLetter {
		return actDeadLetter, d
	}
	return actRetry, d
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
