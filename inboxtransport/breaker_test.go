package inboxtransport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
)

// testClock is a clock the breaker tests move by hand.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// recordingObserver records the pauses a breaker reports.
type recordingObserver struct {
	mu      sync.Mutex
	paused  []PauseEvent
	resumed []PauseEvent
}

func (o *recordingObserver) TxStart(ctx context.Context, _ string, _ []inbox.Message) context.Context {
	return ctx
}
func (o *recordingObserver) TxEnd(context.Context, *inbox.TxEvent)                {}
func (o *recordingObserver) DeadLettered(context.Context, *inbox.DeadLetterEvent) {}
func (o *recordingObserver) Paused(_ context.Context, e *PauseEvent) {
	o.mu.Lock()
	o.paused = append(o.paused, *e)
	o.mu.Unlock()
}
func (o *recordingObserver) Resumed(_ context.Context, e *PauseEvent) {
	o.mu.Lock()
	o.resumed = append(o.resumed, *e)
	o.mu.Unlock()
}

// logCounter counts log records by level.
type logCounter struct {
	mu     sync.Mutex
	counts map[slog.Level]int
}

func (l *logCounter) Enabled(context.Context, slog.Level) bool { return true }
func (l *logCounter) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.counts == nil {
		l.counts = map[slog.Level]int{}
	}
	l.counts[r.Level]++
	return nil
}
func (l *logCounter) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logCounter) WithGroup(string) slog.Handler      { return l }
func (l *logCounter) count(level slog.Level) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.counts[level]
}

func newTestBreaker(limit int) (*Breaker, *testClock, *recordingObserver, *logCounter) {
	clock := &testClock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	obs := &recordingObserver{}
	logs := &logCounter{}
	b := NewBreaker("billing", inbox.Config{Now: clock.Now, Observer: obs}, Settings{StreakLimit: limit, StreakPause: time.Second, Logger: slog.New(logs)})
	return b, clock, obs, logs
}

func handlerFailure(text string) error {
	return stageErr(inbox.StageHandler, fmt.Errorf("handler: %w", errors.New(text)))
}

// TestBreakerOutageLogsOnce: a store outage is logged and reported once
// when it begins and once when it ends, however many messages fail in it,
// and none of its failures is an attempt.
func TestBreakerOutageLogsOnce(t *testing.T) {
	t.Parallel()
	b, clock, obs, logs := newTestBreaker(3)
	ctx := context.Background()
	claim := stageErr(inbox.StageClaim, fmt.Errorf("claim: %w", inbox.ErrPermissionDenied))
	for i := range 50 {
		d := b.Decide(ctx, inbox.Message{ID: fmt.Sprint(i)}, claim, 1_000, 1)
		require.Equal(t, ActionHold, d.Action, "a store failure is never an attempt, even past MaxDeliveries")
		require.Equal(t, inbox.FaultStore, d.Fault)
	}
	require.Equal(t, 1, logs.count(slog.LevelWarn))
	require.Len(t, obs.paused, 1)
	require.Equal(t, PauseOutage, obs.paused[0].Cause)
	st := b.State()
	require.True(t, st.Outage)
	require.Equal(t, 50, st.OutageFailures)
	require.False(t, st.Tripped, "store failures make no streak")

	// A success while the store still fails does not end the outage.
	b.Succeeded(ctx)
	require.True(t, b.State().Outage)
	clock.advance(outageQuiet)
	b.Succeeded(ctx)
	require.False(t, b.State().Outage)
	require.Len(t, obs.resumed, 1)
	require.Equal(t, 50, obs.resumed[0].Failures)
	require.Equal(t, 1, logs.count(slog.LevelInfo))
}

// TestBreakerStreak: distinct messages failing alike open the breaker;
// then no attempt counts, the consumer pauses, a failed probe pauses it
// longer, and a success closes it.
func TestBreakerStreak(t *testing.T) {
	t.Parallel()
	b, clock, obs, _ := newTestBreaker(3)
	ctx := context.Background()
	// The same message failing again is no streak: it uses up its
	// attempts and is dead-lettered.
	for attempt := 1; attempt <= 4; attempt++ {
		d := b.Decide(ctx, inbox.Message{ID: "poison"}, handlerFailure("bad payload"), attempt, 4)
		if attempt < 4 {
			require.Equal(t, ActionRetry, d.Action)
		} else {
			require.Equal(t, ActionDeadLetter, d.Action)
			require.Equal(t, inbox.ReasonMaxAttempts, d.Reason)
		}
	}
	require.Equal(t, 1, b.State().Streak)
	// A different class starts a new streak.
	require.Equal(t, ActionRetry, b.Decide(ctx, inbox.Message{ID: "a"}, handlerFailure("dial tcp 10.0.0.1:443: connection refused"), 1, 5).Action)
	require.Equal(t, ActionRetry, b.Decide(ctx, inbox.Message{ID: "b"}, handlerFailure("dial tcp 10.0.0.2:443: connection refused"), 1, 5).Action)
	require.Equal(t, 2, b.State().Streak, "addresses aside, one class")
	d := b.Decide(ctx, inbox.Message{ID: "c"}, handlerFailure("dial tcp 10.0.0.3:443: connection refused"), 5, 5)
	require.Equal(t, ActionHold, d.Action, "the third distinct message opens the breaker: not an attempt, not dead-lettered at its last attempt")
	require.True(t, d.Tripped)
	require.Equal(t, time.Second, b.Paused())
	require.Len(t, obs.paused, 1)
	require.Equal(t, PauseStreak, obs.paused[0].Cause)
	require.Equal(t, 3, obs.paused[0].Streak)

	// Tries that started before the pause fail too: the pause stands.
	require.Equal(t, ActionHold, b.Decide(ctx, inbox.Message{ID: "d"}, handlerFailure("dial tcp 10.0.0.4:443: connection refused"), 9, 5).Action)
	require.Len(t, obs.paused, 1)
	// A probe after the pause fails: twice the pause.
	clock.advance(time.Second)
	require.Zero(t, b.Paused())
	require.Equal(t, ActionHold, b.Decide(ctx, inbox.Message{ID: "e"}, handlerFailure("connection refused"), 9, 5).Action)
	require.Equal(t, 2*time.Second, b.Paused())
	require.Equal(t, 1, b.State().Probes)
	for range 10 {
		clock.advance(b.Paused())
		b.Decide(ctx, inbox.Message{ID: "e"}, handlerFailure("connection refused"), 9, 5)
	}
	require.Equal(t, 16*time.Second, b.Paused(), "the pause stops doubling at 16 times")

	b.Succeeded(ctx)
	require.Zero(t, b.Paused())
	require.False(t, b.State().Tripped)
	require.Len(t, obs.resumed, 1)
	require.Equal(t, ActionRetry, b.Decide(ctx, inbox.Message{ID: "f"}, handlerFailure("connection refused"), 1, 5).Action, "attempts count again")
}

func TestBreakerDisabled(t *testing.T) {
	t.Parallel()
	b, _, _, _ := newTestBreaker(-1)
	for i := range 20 {
		require.Equal(t, ActionRetry, b.Decide(context.Background(), inbox.Message{ID: fmt.Sprint(i)}, handlerFailure("x"), 1, 2).Action)
	}
	require.Zero(t, b.Paused())
}

func TestErrorClass(t *testing.T) {
	t.Parallel()
	a := errorClass(fmt.Errorf("handler: order 0190c8e4-7b3a-7cc1-9f00-2b7c4e1d9a55: %w", errors.New("amount 12 is over limit 10")))
	b := errorClass(fmt.Errorf("handler: order 0190c8e4-7b3a-7cc1-9f00-2b7c4e1d9a56: %w", errors.New("amount 99 is over limit 10")))
	require.Equal(t, a, b)
	require.True(t, strings.HasPrefix(a, "*errors.errorString: amount # is over limit #"), a)
	require.NotEqual(t, a, errorClass(errors.New("timeout")))
	require.Equal(t, "sqlstate 42501", errorClass(fmt.Errorf("x: %w", sqlStateError("42501"))))
}

type sqlStateError string

func (e sqlStateError) Error() string    { return "sql error " + string(e) }
func (e sqlStateError) SQLState() string { return string(e) }

func stageErr(stage inbox.Stage, err error) error {
	return &inbox.StageError{Stage: stage, Err: err}
}

// TestBreakerTellsJoinedObservers: a breaker finds its BreakerObservers
// among those inbox.Observers joined, and tells each.
func TestBreakerTellsJoinedObservers(t *testing.T) {
	t.Parallel()
	first, second := &recordingObserver{}, &recordingObserver{}
	joined := inbox.Observers(first, plainObserver{}, second)
	b := NewBreaker("billing", inbox.Config{Observer: joined}, Settings{StreakLimit: 3, StreakPause: time.Second, Logger: slog.New(slog.DiscardHandler)})
	claim := stageErr(inbox.StageClaim, fmt.Errorf("claim: %w", inbox.ErrPermissionDenied))
	d := b.Decide(context.Background(), inbox.Message{ID: "1"}, claim, 10, 1)
	require.Equal(t, ActionHold, d.Action)
	require.Len(t, first.paused, 1)
	require.Len(t, second.paused, 1)
	require.Nil(t, breakerObserver(inbox.Observers(plainObserver{})), "no listener, no breaker observer")
}

// plainObserver is an inbox.Observer that is no BreakerObserver.
type plainObserver struct{}

func (plainObserver) TxStart(ctx context.Context, _ string, _ []inbox.Message) context.Context {
	return ctx
}
func (plainObserver) TxEnd(context.Context, *inbox.TxEvent)                {}
func (plainObserver) DeadLettered(context.Context, *inbox.DeadLetterEvent) {}
