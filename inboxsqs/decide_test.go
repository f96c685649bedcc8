package inboxsqs

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/internal/require"
)

// TestDecide covers the redelivery bound for every receive count, which
// goaws (ApproximateReceiveCount always 1) cannot reach.
func TestDecide(t *testing.T) {
	t.Parallel()
	retryable := errors.New("downstream timeout")
	unavailable := fmt.Errorf("inbox: process: %w", inbox.ErrUnavailable)
	lockTimeout := fmt.Errorf("inbox: claim: %w", inbox.ErrLockTimeout)
	panicked := &inbox.PanicError{Value: "boom"}
	const maxReceives = 3
	tests := []struct {
		name      string
		err       error
		receives  int
		cancelled bool
		want      action
		reason    string
	}{
		{"committed", nil, 1, false, actDelete, ""},
		{"committed even at shutdown", nil, 9, true, actDelete, ""},
		{"retryable first receive", retryable, 1, false, actRetry, ""},
		{"retryable below the bound", retryable, maxReceives - 1, false, actRetry, ""},
		{"retryable at the bound", retryable, maxReceives, false, actDeadLetter, inbox.ReasonMaxAttempts},
		{"retryable past the bound", retryable, maxReceives + 5, false, actDeadLetter, inbox.ReasonMaxAttempts},
		{"panic at the bound", panicked, maxReceives, false, actDeadLetter, inbox.ReasonMaxAttempts},
		{"permanent at once", inbox.Permanent(errors.New("bad amount")), 1, false, actDeadLetter, inbox.ReasonPermanent},
		{"no id at once", fmt.Errorf("key: %w", inbox.ErrNoMessageID), 1, false, actDeadLetter, inbox.ReasonNoID},
		{"malformed id at once", fmt.Errorf("key: %w", inbox.ErrMalformedID), 1, false, actDeadLetter, inbox.ReasonMalformedID},
		{"unavailable is never poison", unavailable, maxReceives + 100, false, actRetry, ""},
		{"lock timeout is never poison", lockTimeout, maxReceives, false, actRetry, ""},
		{"cancelled at shutdown", fmt.Errorf("x: %w", context.Canceled), maxReceives, true, actRelease, ""},
		{"cancelled beats permanent", inbox.Permanent(errors.New("x")), 1, true, actRelease, ""},
		{"not attempted", inbox.ErrNotAttempted, maxReceives, false, actRequeue, ""},
		{"not attempted at shutdown", inbox.ErrNotAttempted, 1, true, actRequeue, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := inbox.NewBreaker("billing", nil)
			got, d := decide(context.Background(), b, inbox.Message{ID: "e-1"}, tt.err, tt.receives, maxReceives, tt.cancelled)
			require.Equal(t, tt.want, got, "action %v", got)
			require.Equal(t, tt.reason, d.Reason)
		})
	}
}

// TestRetryDelay covers the backoff growing with the receive count.
func TestRetryDelay(t *testing.T) {
	t.Parallel()
	tests := []struct {
		base, max time.Duration
		receives  int
		want      time.Duration
	}{
		{time.Second, time.Minute, 1, time.Second},
		{time.Second, time.Minute, 2, 2 * time.Second},
		{time.Second, time.Minute, 4, 8 * time.Second},
		{time.Second, time.Minute, 7, time.Minute},
		{time.Second, time.Minute, 1000, time.Minute},
		{300 * time.Millisecond, time.Minute, 1, time.Second}, // whole seconds, never 0
		{0, time.Minute, 3, time.Second},
		{1500 * time.Millisecond, time.Minute, 2, 3 * time.Second},
		{1500 * time.Millisecond, 2500 * time.Millisecond, 3, 3 * time.Second},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, retryDelay(tt.base, tt.max, tt.receives), "%+v", tt)
	}
}
