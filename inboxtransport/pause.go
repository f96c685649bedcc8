package inboxtransport

import (
	"context"
	"time"

	"github.com/txinbox/inbox"
)

// BreakerObserver is an inbox.Observer that is also told when a transport
// adapter's Breaker pauses a consumer and when it resumes: a store outage
// began or ended, or a streak of distinct messages failing alike opened the
// breaker (again, for each failed probe) or a success closed it. Implement
// it beside inbox.Observer; a Breaker finds it in inbox.Config.Observer.
type BreakerObserver interface {
	Paused(ctx context.Context, e *PauseEvent)
	Resumed(ctx context.Context, e *PauseEvent)
}

// PauseCause is why a Breaker paused a consumer.
type PauseCause int

// The causes of a pause.
const (
	// PauseOutage: the store failed (inbox.FaultStore), claims timed out waiting
	// for a lock (inbox.FaultContention), or a handler reported something every
	// message needs unavailable (inbox.FaultSystemic).
	PauseOutage PauseCause = iota + 1
	// PauseStreak: distinct messages in a row failed with the same class
	// of error, and the streak breaker opened.
	PauseStreak
)

func (c PauseCause) String() string {
	switch c {
	case PauseOutage:
		return "outage"
	case PauseStreak:
		return "streak"
	}
	return "PauseCause(?)"
}

// PauseEvent describes a pause of a consumer, when it begins (Paused) and
// when it ends (Resumed).
type PauseEvent struct {
	Consumer string
	Cause    PauseCause
	// Fault is inbox.FaultStore, FaultContention or FaultSystemic for an
	// outage, FaultMessage for a streak.
	Fault inbox.Fault
	// Err is the failure that began the outage, or that opened the
	// breaker (or failed its probe).
	Err error
	// Streak is how many distinct messages in a row failed with an error
	// of StreakClass.
	Streak      int
	StreakClass string
	// Since is when the outage began, or when the breaker opened.
	Since time.Time
	// Pause is, for a streak, how long the consumer waits before its next
	// probe.
	Pause time.Duration
	// Failures counts, for an outage that ended, the store's failures
	// during it; for a streak, the probes that failed.
	Failures int
}
