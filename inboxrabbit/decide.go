package inboxrabbit

import (
	"context"
	"errors"
	"time"

	"github.com/txinbox/inbox"
)

// This file is what becomes of a message after the inbox processed it. The
// judgement itself is inbox.Breaker's, which inboxkafka, inboxsqs and
// inboxnats share; what is RabbitMQ's is the action each decision maps to.

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

// decide says what to do with a delivery whose processing returned err,
// after attempt attempts of its own (see Consumer.attempt). cancelled
// tells that the processing context was cancelled (shutdown), which says
// nothing about the message. The rule of whose fault a failure is, and of
// when a message has used up its attempts, is the Breaker's, which every
// transport adapter shares; with actDeadLetter, the Decision carries the
// reason. With actRetry, the Decision tells a failure that was an attempt
// (inbox.ActionRetry) from one that was not (inbox.ActionHold).
func decide(ctx context.Context, b *inbox.Breaker, msg inbox.Message, err error, attempt, maxDeliver int, cancelled bool) (action, inbox.Decision) {
	switch {
	case err == nil:
		return actAck, inbox.Decision{}
	case errors.Is(err, inbox.ErrNotAttempted):
		return actRequeue, inbox.Decision{}
	case cancelled:
		return actRelease, inbox.Decision{}
	}
	d := b.Decide(ctx, msg, err, attempt, maxDeliver)
	if d.Action == inbox.ActionDeadLetter {
		return actDeadLetter, d
	}
	return actRetry, d
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
