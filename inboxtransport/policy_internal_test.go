package inboxtransport

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
)

type carrier struct{ tr Delivery }

func (c *carrier) Delivery() *Delivery { return &c.tr }

func testPolicy(maxAttempts int) *Policy[struct{}, *carrier] {
	return &Policy[struct{}, *carrier]{
		cfg:     Config[struct{}, *carrier]{MaxDeliveries: maxAttempts, RetryBackoff: time.Second, MaxRetryBackoff: time.Minute},
		breaker: NewBreaker("billing", inbox.Config{}, Settings{}),
		counts:  newCounts(maxCounted),
	}
}

// TestJudge covers the verdict on every kind of result, at every attempt.
func TestJudge(t *testing.T) {
	t.Parallel()
	retryable := errors.New("downstream timeout")
	unavailable := fmt.Errorf("inbox: process: %w", inbox.ErrUnavailable)
	lockTimeout := fmt.Errorf("inbox: claim: %w", inbox.ErrLockTimeout)
	panicked := &inbox.PanicError{Value: "boom"}
	const maxAttempts = 3
	tests := []struct {
		name      string
		err       error
		attempt   int
		cancelled bool
		want      Verdict
		reason    string
	}{
		{"committed", nil, 1, false, Ack, ""},
		{"committed even at shutdown", nil, 9, true, Ack, ""},
		{"retryable first attempt", retryable, 1, false, Retry, ""},
		{"retryable below the bound", retryable, maxAttempts - 1, false, Retry, ""},
		{"retryable at the bound", retryable, maxAttempts, false, DeadLettered, inbox.ReasonMaxAttempts},
		{"retryable past the bound", retryable, maxAttempts + 5, false, DeadLettered, inbox.ReasonMaxAttempts},
		{"panic at the bound", panicked, maxAttempts, false, DeadLettered, inbox.ReasonMaxAttempts},
		{"permanent at once", inbox.Permanent(errors.New("bad amount")), 1, false, DeadLettered, inbox.ReasonPermanent},
		{"no id at once", fmt.Errorf("key: %w", inbox.ErrNoMessageID), 1, false, DeadLettered, inbox.ReasonNoID},
		{"malformed id at once", fmt.Errorf("key: %w", inbox.ErrMalformedID), 1, false, DeadLettered, inbox.ReasonMalformedID},
		{"unknown outcome at once", fmt.Errorf("effect: %w", inbox.ErrUnknownOutcome), 1, false, DeadLettered, inbox.ReasonUnknownOutcome},
		{"unavailable is never poison", unavailable, maxAttempts + 100, false, Retry, ""},
		{"lock timeout is never poison", lockTimeout, maxAttempts, false, Retry, ""},
		{"cancelled at shutdown", fmt.Errorf("x: %w", context.Canceled), maxAttempts, true, Release, ""},
		{"cancelled beats permanent", inbox.Permanent(errors.New("x")), 1, true, Release, ""},
		{"not attempted", inbox.ErrNotAttempted, maxAttempts, false, Requeue, ""},
		{"not attempted at shutdown", inbox.ErrNotAttempted, 1, true, Requeue, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := testPolicy(maxAttempts)
			got, d := p.judge(context.Background(), inbox.Message{ID: "e-1"}, tt.err, tt.attempt, tt.cancelled, false)
			require.Equal(t, tt.want, got, "verdict %v", got)
			require.Equal(t, tt.reason, d.Reason)
		})
	}
}

// TestJudgeTrippedAtStart: a failure of the message's own whose handler
// ran while the streak breaker was open is no attempt, even when the
// breaker closed (another worker's success) before it was judged; a
// permanent error still dead-letters.
func TestJudgeTrippedAtStart(t *testing.T) {
	t.Parallel()
	const maxAttempts = 1
	retryable := errors.New("ledger service: 503")
	p := testPolicy(maxAttempts)
	got, d := p.judge(context.Background(), inbox.Message{ID: "e-1"}, retryable, maxAttempts, false, true)
	require.Equal(t, Retry, got, "held, not dead-lettered")
	require.Equal(t, ActionHold, d.Action, "no attempt counted")
	require.True(t, d.Tripped)
	got, _ = p.judge(context.Background(), inbox.Message{ID: "e-2"}, retryable, maxAttempts, false, false)
	require.Equal(t, DeadLettered, got, "with the breaker closed throughout, the last attempt dead-letters")
	got, d = p.judge(context.Background(), inbox.Message{ID: "e-3"}, inbox.Permanent(errors.New("bad amount")), 1, false, true)
	require.Equal(t, DeadLettered, got)
	require.Equal(t, inbox.ReasonPermanent, d.Reason)
}

// TestAttemptLeavesOutExcusedDeliveries: a delivery's attempt is the
// broker's count less the deliveries that were not attempts, or one more
// than this process's count of failures, whichever is more; on the
// broker's last delivery at least MaxDeliveries.
func TestAttemptLeavesOutExcusedDeliveries(t *testing.T) {
	t.Parallel()
	p := testPolicy(7)
	counted := &Delivery{Message: inbox.Message{ID: "e-1", Source: inbox.Source{Attempt: 5}}}
	p.fill(counted)
	require.Equal(t, 5, p.attempt(counted))
	for range 3 {
		p.counts.excuse("e-1")
	}
	require.Equal(t, 2, p.attempt(counted))
	p.counts.fail("e-1")
	p.counts.fail("e-1")
	require.Equal(t, 3, p.attempt(counted), "this process saw two failures of its own")
	for range 10 {
		p.counts.excuse("e-1")
	}
	require.Equal(t, 3, p.attempt(counted), "this delivery is an attempt whatever the counts say")
	counted.Last = true
	require.Equal(t, 7, p.attempt(counted), "the broker will not deliver it again")
	counted.Last = false
	p.counts.forget("e-1")
	require.Equal(t, 5, p.attempt(counted))

	// Track names the message across deliveries, not its id.
	tracked := &Delivery{Message: inbox.Message{ID: "e-9", Source: inbox.Source{Attempt: 2}}, Track: "ORDERS/7"}
	p.fill(tracked)
	p.counts.excuse("ORDERS/7")
	require.Equal(t, 1, p.attempt(tracked))
	require.Equal(t, 2, p.attempt(&Delivery{Message: inbox.Message{ID: "e-9"}, broker: 2}), "counts are per message")

	// A broker that counts nothing: this process's failures decide, and
	// fill sets the Source from them.
	classic := &Delivery{Message: inbox.Message{ID: "e-2"}}
	p.fill(classic)
	require.Equal(t, 1, classic.Message.Source.Attempt)
	require.False(t, classic.Message.Source.Redelivered)
	require.Equal(t, 1, p.attempt(classic))
	p.counts.excuse("e-2")
	require.Equal(t, 1, p.attempt(classic))
	p.counts.fail("e-2")
	require.Equal(t, 2, p.attempt(classic))
	p.fill(classic)
	require.Equal(t, 2, classic.Message.Source.Attempt)
	require.True(t, classic.Message.Source.Redelivered, "this process tried it before")
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
		{time.Second, time.Minute, 40, time.Minute},
		{time.Second, 3 * time.Second, 3, 3 * time.Second},
		{0, time.Minute, 5, 0},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, retryDelay(tt.base, tt.max, tt.delivered), "%+v", tt)
	}
}

// TestCountsAreBounded: the counts keep at most their limit of messages.
func TestCountsAreBounded(t *testing.T) {
	t.Parallel()
	c := newCounts(3)
	c.fail("a")
	c.fail("a")
	failed, _ := c.get("a")
	require.Equal(t, 2, failed)
	for _, id := range []string{"b", "c", "d", "e"} {
		c.fail(id)
	}
	require.LessOrEqual(t, len(c.n), 3)
	c.forget("e")
	failed, _ = c.get("e")
	require.Zero(t, failed)
	c.fail("")
	c.excuse("")
	failed, excused := c.get("")
	require.Zero(t, failed+excused)
	c.excuse("f")
	c.excuse("f")
	failed, excused = c.get("f")
	require.Equal(t, 2, excused)
	require.Zero(t, failed)
	require.LessOrEqual(t, len(c.n), 3)
}
