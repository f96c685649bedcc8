package inboxtransport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/txinbox/inbox"
)

// maxStreakPauseDoublings caps the doubling of Settings.StreakPause while the
// probes of a tripped breaker fail: 16 times the pause at most.
const maxStreakPauseDoublings = 4

// outageQuiet is how long the store must go without failing, at a success,
// for an outage to be over: while some deliveries still fail (one session
// left alive, sessions ended again and again, a partition whose backoff has
// not run out), successes do not end it, so it is logged once.
const outageQuiet = 5 * time.Second

// Action is what a transport adapter does with a message that failed, as a
// Breaker decides it.
type Action int

// The actions of a Decision.
const (
	// ActionRetry: try the message again later; this failure counted as
	// one of its attempts.
	ActionRetry Action = iota + 1
	// ActionHold: try the message again later; this failure was not an
	// attempt (the store's, systemic, contention, or the streak breaker is
	// open). Never dead-letter for it.
	ActionHold
	// ActionDeadLetter: store the message as a dead letter, with
	// Decision.Reason, and ack it.
	ActionDeadLetter
)

func (a Action) String() string {
	switch a {
	case ActionRetry:
		return "retry"
	case ActionHold:
		return "hold"
	case ActionDeadLetter:
		return "dead-letter"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Decision is what becomes of a message that failed.
type Decision struct {
	Action Action
	// Fault is whose fault the failure was (inbox.Judge).
	Fault inbox.Fault
	// Reason is the dead-letter reason, with ActionDeadLetter.
	Reason string
	// Tripped reports that the streak breaker is open: the failure was the
	// message's kind, but too many distinct messages failed alike for it
	// to be the message's. Wait Breaker.Paused before the next try.
	Tripped bool
}

// Breaker holds the delivery policy that transport adapters share for one
// consumer: whose fault a failure is (inbox.Judge), when a message has used up
// its attempts, when the store is down, and the streak breaker. Each
// adapter's consumer makes one with Client.NewBreaker and asks it about
// every failure (Decide) and every success (Succeeded), so that no two
// adapters decide differently.
//
// A store outage (inbox.FaultStore, inbox.FaultSystemic, and claims that time out
// waiting for a lock, inbox.FaultContention) is logged once when it begins, at
// Warn, and once when it ends, at Info, and reported to a BreakerObserver;
// each failure in between is logged at Debug only.
//
// The streak breaker: when Settings.StreakLimit distinct messages in a row
// fail with the same class of error, the cause is not the messages. The
// breaker opens: it stops counting attempts, so that it dead-letters no
// healthy message, and pauses the consumer for Settings.StreakPause (Paused);
// then the next try is a probe. A failed probe pauses again, twice as long,
// up to 16 times StreakPause; a success closes the breaker. Two errors are
// of the same class when their innermost errors have the same type and
// text, digits aside, or the same SQLSTATE.
//
// A Breaker is safe for concurrent use.
type Breaker struct {
	consumer string
	limit    int
	pause    time.Duration
	logger   *slog.Logger
	obs      BreakerObserver
	now      func() time.Time

	mu sync.Mutex
	// The streak: distinct ids that failed in a row with class.
	class   string
	ids     map[string]struct{}
	tripped bool
	since   time.Time // when the breaker opened
	curr    time.Duration
	until   time.Time // the pause lasts until then
	probes  int
	// The outage.
	outage         bool
	outageSince    time.Time
	outageLast     time.Time
	outageFailures int
	outageFault    inbox.Fault
	outageErr      error
}

// NewBreaker returns a Breaker for consumer with settings' StreakLimit,
// StreakPause and Logger, and config's Observer and Now, as a client's
// Config holds them (inbox.Client.Config): zero values take the defaults.
// Its logs go to settings.Logger; nil uses config.Logger, and nil there is
// silent. A Policy makes its own.
func NewBreaker(consumer string, config inbox.Config, settings Settings) *Breaker {
	logger := settings.Logger
	if logger == nil {
		logger = config.Logger
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	limit, pause, now := settings.StreakLimit, settings.StreakPause, config.Now
	if limit == 0 {
		limit = DefaultStreakLimit
	}
	if pause <= 0 {
		pause = DefaultStreakPause
	}
	if now == nil {
		now = time.Now
	}
	b := &Breaker{
		consumer: consumer,
		limit:    max(limit, 0),
		pause:    pause,
		logger:   logger,
		now:      now,
		ids:      map[string]struct{}{},
	}
	b.obs = breakerObserver(config.Observer)
	return b
}

// Decide judges a failure of msg, whose id is msg.ID ("" when it has none),
// with err, and says what to do with it. attempt is the number of this try
// counting it as an attempt, such as 1 on a message's first failure; a
// message whose attempt reaches maxAttempts is dead-lettered. err must not
// be nil, nor a failure of the adapter's own shutdown: the adapter handles
// those.
func (b *Breaker) Decide(ctx context.Context, msg inbox.Message, err error, attempt, maxAttempts int) Decision {
	f := inbox.Judge(err)
	switch f {
	case inbox.FaultPermanent:
		return Decision{Action: ActionDeadLetter, Fault: f, Reason: inbox.DeadLetterReason(err)}
	case inbox.FaultStore, inbox.FaultSystemic:
		b.storeFailed(ctx, f, err)
		return Decision{Action: ActionHold, Fault: f}
	case inbox.FaultContention:
		if !errors.Is(err, inbox.ErrNotAttempted) {
			b.storeFailed(ctx, f, err)
		}
		return Decision{Action: ActionHold, Fault: f}
	case inbox.FaultMessage:
		if b.streak(ctx, msg.ID, err) {
			return Decision{Action: ActionHold, Fault: f, Tripped: true}
		}
		if attempt >= maxAttempts {
			return Decision{Action: ActionDeadLetter, Fault: f, Reason: inbox.ReasonMaxAttempts}
		}
		return Decision{Action: ActionRetry, Fault: f}
	}
	return Decision{Action: ActionHold, Fault: f}
}

// Succeeded tells the breaker that a message of the consumer was applied
// or found a duplicate: it ends a streak, closes the breaker, and ends an
// outage once the store has not failed for five seconds.
func (b *Breaker) Succeeded(ctx context.Context) {
	b.mu.Lock()
	var events []func()
	if b.tripped {
		e := b.event(PauseStreak, inbox.FaultMessage, nil)
		e.Failures = b.probes
		b.logger.InfoContext(ctx, "inbox: a message succeeded; the consumer resumes, counting attempts again",
			"consumer", b.consumer, "paused_for", b.now().Sub(b.since).Round(time.Millisecond), "probes", b.probes)
		b.tripped, b.probes, b.curr, b.until = false, 0, 0, time.Time{}
		events = append(events, func() { b.report(ctx, false, e) })
	}
	if b.class != "" {
		b.class = ""
		clear(b.ids)
	}
	if b.outage && b.now().Sub(b.outageLast) >= outageQuiet {
		e := b.event(PauseOutage, b.outageFault, b.outageErr)
		e.Since, e.Failures = b.outageSince, b.outageFailures
		b.logger.InfoContext(ctx, "inbox: the store is available again", "consumer", b.consumer,
			"outage", b.now().Sub(b.outageSince).Round(time.Millisecond), "failures", b.outageFailures)
		b.outage = false
		events = append(events, func() { b.report(ctx, false, e) })
	}
	b.mu.Unlock()
	for _, f := range events {
		f()
	}
}

// Paused returns how much longer the consumer must wait before its next
// try, while the streak breaker is open: 0 otherwise. Adapters wait it
// out before they take more messages.
func (b *Breaker) Paused() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.tripped {
		return 0
	}
	return max(b.until.Sub(b.now()), 0)
}

// BreakerState is a snapshot of a Breaker, for an operator.
type BreakerState struct {
	Consumer string
	// Outage reports that the store (or something every message needs)
	// has been failing since OutageSince, OutageFailures times, last with
	// OutageErr.
	Outage         bool
	OutageSince    time.Time
	OutageFailures int
	OutageErr      error
	// Streak is how many distinct messages in a row failed with an error
	// of StreakClass.
	Streak      int
	StreakClass string
	// Tripped reports that the streak opened the breaker at TrippedAt: the
	// consumer counts no attempts, and is paused until PausedUntil, after
	// which it probes. Probes is how many probes have failed.
	Tripped     bool
	TrippedAt   time.Time
	PausedUntil time.Time
	Probes      int
}

// isTripped reports whether the streak opened the breaker.
func (b *Breaker) isTripped() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.tripped
}

// State returns a snapshot of the breaker.
func (b *Breaker) State() BreakerState {
	b.mu.Lock()
	defer b.mu.Unlock()
	return BreakerState{
		Consumer: b.consumer,
		Outage:   b.outage, OutageSince: b.outageSince, OutageFailures: b.outageFailures, OutageErr: b.outageErr,
		Streak: len(b.ids), StreakClass: b.class,
		Tripped: b.tripped, TrippedAt: b.since, PausedUntil: b.until, Probes: b.probes,
	}
}

// storeFailed records a failure of the store, and logs and reports the
// beginning of an outage.
func (b *Breaker) storeFailed(ctx context.Context, f inbox.Fault, err error) {
	b.mu.Lock()
	now := b.now()
	b.outageLast = now
	b.outageFailures++
	if b.outage {
		b.mu.Unlock()
		b.logger.DebugContext(ctx, "inbox: the store is still unavailable", "consumer", b.consumer, "fault", f, "err", err)
		return
	}
	b.outage, b.outageSince, b.outageFailures, b.outageFault, b.outageErr = true, now, 1, f, err
	e := b.event(PauseOutage, f, err)
	b.mu.Unlock()
	what := "inbox: the store is unavailable; pausing and trying again, without counting attempts"
	switch f {
	case inbox.FaultSystemic:
		what = "inbox: the handler reports a dependency unavailable; pausing and trying again, without counting attempts"
	case inbox.FaultContention:
		what = "inbox: claims time out waiting for a lock (an in-flight delivery of the same message, or a lock on the inbox); trying again, without counting attempts"
	}
	b.logger.WarnContext(ctx, what, "consumer", b.consumer, "err", err)
	b.report(ctx, true, e)
}

// streak records a failure of the message with id, of inbox.FaultMessage, and
// reports whether the breaker is open.
func (b *Breaker) streak(ctx context.Context, id string, err error) bool {
	if b.limit <= 0 {
		return false
	}
	class := errorClass(err)
	b.mu.Lock()
	if class != b.class {
		b.class = class
		clear(b.ids)
	}
	if len(b.ids) < b.limit {
		b.ids[id] = struct{}{}
	}
	now := b.now()
	switch {
	case b.tripped && now.Before(b.until):
		// A try that started before the pause: the pause stands.
		b.mu.Unlock()
		return true
	case b.tripped:
		// A probe failed: pause again, longer.
		b.probes++
		b.curr = min(b.curr*2, b.pause<<maxStreakPauseDoublings)
	case len(b.ids) >= b.limit:
		b.tripped, b.since, b.curr, b.probes = true, now, b.pause, 0
	default:
		b.mu.Unlock()
		return false
	}
	b.until = now.Add(b.curr)
	e := b.event(PauseStreak, inbox.FaultMessage, err)
	e.Failures = b.probes
	pause, probes := b.curr, b.probes
	b.mu.Unlock()
	if probes == 0 {
		b.logger.WarnContext(ctx, "inbox: distinct messages in a row failed alike; the cause is not the messages: pausing, counting no attempts, then probing",
			"consumer", b.consumer, "streak", e.Streak, "class", class, "pause", pause, "err", err)
	} else {
		b.logger.WarnContext(ctx, "inbox: the probe failed alike; pausing again", "consumer", b.consumer,
			"streak", e.Streak, "class", class, "pause", pause, "probes", probes, "err", err)
	}
	b.report(ctx, true, e)
	return true
}

// event describes the breaker's state; the caller holds b.mu.
func (b *Breaker) event(cause PauseCause, f inbox.Fault, err error) *PauseEvent {
	e := &PauseEvent{Consumer: b.consumer, Cause: cause, Fault: f, Err: err, Streak: len(b.ids), StreakClass: b.class}
	if cause == PauseStreak {
		e.Since, e.Pause = b.since, b.curr
	}
	return e
}

func (b *Breaker) report(ctx context.Context, paused bool, e *PauseEvent) {
	switch {
	case b.obs == nil:
	case paused:
		b.obs.Paused(ctx, e)
	default:
		b.obs.Resumed(ctx, e)
	}
}

// errorClass names the class of err for the streak breaker: the SQLSTATE
// of a database error, or else the type and text of the innermost error,
// with every word that holds a digit (numbers, ids, addresses) replaced.
func errorClass(err error) string {
	var st interface{ SQLState() string }
	if errors.As(err, &st) {
		return "sqlstate " + st.SQLState()
	}
	leaf := err
	for range 100 {
		var next error
		switch u := leaf.(type) {
		case interface{ Unwrap() error }:
			next = u.Unwrap()
		case interface{ Unwrap() []error }:
			if es := u.Unwrap(); len(es) > 0 {
				next = es[0]
			}
		}
		if next == nil {
			break
		}
		leaf = next
	}
	text := leaf.Error()
	if len(text) > 200 {
		text = text[:200]
	}
	words := strings.FieldsFunc(text, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
	for i, w := range words {
		if strings.ContainsFunc(w, unicode.IsDigit) {
			words[i] = "#"
		}
	}
	return fmt.Sprintf("%T: %s", leaf, strings.Join(words, " "))
}

// breakerObserver finds the BreakerObserver in o: o itself, or those of the
// observers that inbox.Observers joined.
func breakerObserver(o inbox.Observer) BreakerObserver {
	if b, ok := o.(BreakerObserver); ok {
		return b
	}
	u, ok := o.(interface{ Unwrap() []inbox.Observer })
	if !ok {
		return nil
	}
	var bs breakerObservers
	for _, o := range u.Unwrap() {
		if b := breakerObserver(o); b != nil {
			bs = append(bs, b)
		}
	}
	if len(bs) == 0 {
		return nil
	}
	return bs
}

type breakerObservers []BreakerObserver

func (bs breakerObservers) Paused(ctx context.Context, e *PauseEvent) {
	for _, b := range bs {
		b.Paused(ctx, e)
	}
}

func (bs breakerObservers) Resumed(ctx context.Context, e *PauseEvent) {
	for _, b := range bs {
		b.Resumed(ctx, e)
	}
}
