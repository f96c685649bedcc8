package inboxrabbit

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/internal/require"
)

// TestDecide covers the judgement of every kind of result, at every
// delivery count.
func TestDecide(t *testing.T) {
	t.Parallel()
	retryable := errors.New("downstream timeout")
	unavailable := fmt.Errorf("inbox: process: %w", inbox.ErrUnavailable)
	lockTimeout := fmt.Errorf("inbox: claim: %w", inbox.ErrLockTimeout)
	panicked := &inbox.PanicError{Value: "boom"}
	const maxDeliver = 3
	tests := []struct {
		name      string
		err       error
		delivered int
		cancelled bool
		want      action
		reason    string
	}{
		{"committed", nil, 1, false, actAck, ""},
		{"committed even at shutdown", nil, 9, true, actAck, ""},
		{"retryable first delivery", retryable, 1, false, actRetry, ""},
		{"retryable below the bound", retryable, maxDeliver - 1, false, actRetry, ""},
		{"retryable at the bound", retryable, maxDeliver, false, actDeadLetter, inbox.ReasonMaxAttempts},
		{"retryable past the bound", retryable, maxDeliver + 5, false, actDeadLetter, inbox.ReasonMaxAttempts},
		{"panic at the bound", panicked, maxDeliver, false, actDeadLetter, inbox.ReasonMaxAttempts},
		{"permanent at once", inbox.Permanent(errors.New("bad amount")), 1, false, actDeadLetter, inbox.ReasonPermanent},
		{"no id at once", fmt.Errorf("key: %w", inbox.ErrNoMessageID), 1, false, actDeadLetter, inbox.ReasonNoID},
		{"malformed id at once", fmt.Errorf("key: %w", inbox.ErrMalformedID), 1, false, actDeadLetter, inbox.ReasonMalformedID},
		{"unknown outcome at once", fmt.Errorf("effect: %w", inbox.ErrUnknownOutcome), 1, false, actDeadLetter, inbox.ReasonUnknownOutcome},
		{"unavailable is never poison", unavailable, maxDeliver + 100, false, actRetry, ""},
		{"lock timeout is never poison", lockTimeout, maxDeliver, false, actRetry, ""},
		{"cancelled at shutdown", fmt.Errorf("x: %w", context.Canceled), maxDeliver, true, actRelease, ""},
		{"cancelled beats permanent", inbox.Permanent(errors.New("x")), 1, true, actRelease, ""},
		{"not attempted", inbox.ErrNotAttempted, maxDeliver, false, actRequeue, ""},
		{"not attempted at shutdown", inbox.ErrNotAttempted, 1, true, actRequeue, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := inbox.NewBreaker("billing", nil)
			got, d := decide(context.Background(), b, inbox.Message{ID: "e-1"}, tt.err, tt.delivered, maxDeliver, tt.cancelled)
			require.Equal(t, tt.want, got, "action %v", got)
			require.Equal(t, tt.reason, d.Reason)
		})
	}
}

// TestAttemptLeavesOutExcusedDeliveries: a delivery's attempt is the
// quorum queue's count less the deliveries that were not attempts, or one
// more than this process's count of failed attempts, whichever is more.
func TestAttemptLeavesOutExcusedDeliveries(t *testing.T) {
	t.Parallel()
	c := &Consumer[struct{}]{attempts: newAttempts(maxTrackedAttempts)}
	quorum := &delivery{msg: inbox.Message{ID: "e-1"}, brokerCount: 5}
	require.Equal(t, 5, c.attempt(quorum))
	for range 3 {
		c.attempts.excuse("e-1")
	}
	require.Equal(t, 2, c.attempt(quorum))
	c.attempts.fail("e-1")
	c.attempts.fail("e-1")
	require.Equal(t, 3, c.attempt(quorum), "this process saw two failures of its own")
	for range 10 {
		c.attempts.excuse("e-1")
	}
	require.Equal(t, 3, c.attempt(quorum))
	c.attempts.forget("e-1")
	require.Equal(t, 5, c.attempt(quorum))
	// A classic queue counts nothing: this process's failures decide.
	classic := &delivery{msg: inbox.Message{ID: "e-2"}}
	require.Equal(t, 1, c.attempt(classic))
	c.attempts.excuse("e-2")
	require.Equal(t, 1, c.attempt(classic))
	c.attempts.fail("e-2")
	require.Equal(t, 2, c.attempt(classic))
}

// TestRetryDelay covers the backoff growing with the delivery count.
func TestRetryDelay(t *testing.T) {
	t.Parallel()
	tests := []struct {
		base, max time.Duration
		delivered int
		want      time.Duration
	}{
		{time.Second, time.Minute, 1, time.Second},
		{time.Second, time.Minute, 2, 2 * time.Second},
		{time.Second, time.Minute, 4, 8 * time.Second},
		{time.Second, time.Minute, 7, time.Minute},
		{time.Second, time.Minute, 1 << 30, time.Minute},
		{100 * time.Millisecond, time.Minute, 1, 100 * time.Millisecond},
		{1500 * time.Millisecond, 2500 * time.Millisecond, 3, 2500 * time.Millisecond},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, retryDelay(tt.base, tt.max, tt.delivered), "%+v", tt)
	}
}
