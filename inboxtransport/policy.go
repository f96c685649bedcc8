package inboxtransport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/internal/transportkit"
)

// Delivery is one message a transport received, as the Policy sees it. A
// transport keeps it in its own delivery type, which returns it from
// Carrier.Delivery.
type Delivery struct {
	// Message is the message as received, with no ID yet: its payload,
	// headers and Source. Set Source.Attempt to the broker's delivery
	// count of the message, this delivery included (0 when the broker
	// keeps none), and Source.Redelivered when the broker says it may
	// have delivered the message before. Process sets ID; where the
	// broker keeps no count, it sets Source.Attempt to the attempt this
	// process counts, and Redelivered when this process tried the
	// message before.
	Message inbox.Message
	// Track names the message across its deliveries, in this process's
	// count of its attempts: a broker's id of the message (an SQS
	// MessageId, a stream sequence) that stays the same when the message
	// is delivered again. "" names it by its event id.
	Track string
	// Last reports that the broker will not deliver the message again
	// (a JetStream consumer's own MaxDeliver): a failure of its own
	// dead-letters it now.
	Last bool

	// broker is the Source.Attempt the transport set, and filled
	// reports that it was read.
	broker int
	filled bool

	// mu serialises the Loop's settling of the delivery with its
	// extension: none is sent during or after the call that settles it.
	mu       sync.Mutex
	settled  bool
	extended time.Time // when it was received or last extended
	lost     bool      // an extension found the broker no longer holds it
}

// Carrier is a transport's own delivery type: it holds a Delivery, and
// the broker's handle to settle it.
type Carrier interface {
	Delivery() *Delivery
}

// Verdict is what a transport does with a delivery after Process.
type Verdict uint8

// The verdicts of a Settlement.
const (
	// Ack: the message's transaction committed, or it was a duplicate
	// (Settlement.Outcome). Acknowledge it.
	Ack Verdict = iota + 1
	// DeadLettered: the message will never be applied, and is stored as
	// a dead letter with Settlement.Reason. Acknowledge it, or terminate
	// it where the broker tells the two apart.
	DeadLettered
	// Retry: the message failed and may succeed later. Hand it back for
	// a redelivery after Settlement.Delay, or try it again in place after
	// a backoff. Settlement.Attempted tells a failure that counted as one
	// of its attempts from one that did not (the store's, a
	// dependency's, an open streak breaker, a dead-letter write that
	// failed).
	Retry
	// Requeue: the message was not attempted: an earlier message of its
	// ordered batch failed. Hand it back at once, or hold it for its
	// turn.
	Requeue
	// Release: processing was cancelled (a shutdown): nothing is known
	// about the message. Hand it back at once, for another consumer.
	Release
)

func (v Verdict) String() string {
	switch v {
	case Ack:
		return "ack"
	case DeadLettered:
		return "dead-lettered"
	case Retry:
		return "retry"
	case Requeue:
		return "requeue"
	case Release:
		return "release"
	}
	return fmt.Sprintf("Verdict(%d)", int(v))
}

// Settlement is what became of one delivery in Process.
type Settlement struct {
	Verdict Verdict
	// Outcome is the message's outcome, with Ack.
	Outcome inbox.Outcome
	// Reason is the dead-letter reason, with DeadLettered.
	Reason string
	// Err is the failure, with every verdict but Ack, and Fault whose
	// it was (inbox.Judge).
	Err   error
	Fault inbox.Fault
	// Attempt is the attempt this delivery counted as; with
	// DeadLettered, the attempts stored with the dead letter: 0 for a
	// message whose KeyFunc failed, whose handler never ran.
	Attempt int
	// Attempted reports, with Retry, that the failure counted as an
	// attempt.
	Attempted bool
	// Delay is, with Retry, the backoff before the next try: RetryBackoff
	// doubled per earlier delivery, capped at MaxRetryBackoff.
	Delay time.Duration
}

// Config configures a Policy. Client, Handler, Consumer and Key are
// required.
type Config[TTx any, D Carrier] struct {
	Client   *inbox.Client[TTx]
	Handler  inbox.Handler[TTx]
	Consumer string
	Key      inbox.KeyFunc
	// MaxDeliveries is how many of a message's own failures dead-letter
	// it with inbox.ReasonMaxAttempts. Defaults to 1.
	MaxDeliveries int
	// RetryBackoff and MaxRetryBackoff set Settlement.Delay, and the
	// pause of Wait after the store was found unavailable, which doubles
	// while it stays so. Default to DefaultRetryBackoff and
	// DefaultMaxRetryBackoff (1s and 1m).
	RetryBackoff    time.Duration
	MaxRetryBackoff time.Duration
	// StreakLimit and StreakPause configure the Breaker the policy makes
	// when Breaker is nil (Settings). Default to DefaultStreakLimit and
	// DefaultStreakPause (5 and 5s).
	StreakLimit int
	StreakPause time.Duration
	// Name prefixes the policy's logs and errors, such as "inboxsqs".
	Name   string
	Logger *slog.Logger
	// AbandonOnCancel stops a dead-letter write when the processing
	// context is cancelled, for a transport that hands the message to
	// another owner when it cancels (a revoked Kafka partition). By
	// default the write outlives the cancellation, bounded, so that a
	// consumer shutting down settles what it processed.
	AbandonOnCancel bool
	// Breaker is the breaker to judge failures with, when the transport
	// keeps one across policies. Defaults to a new one, of StreakLimit,
	// StreakPause and Client's Config, logging to Logger.
	Breaker *Breaker
	// DeadLetter, when set, writes a dead letter instead of store alone:
	// it may change p before it calls store, and send the message to the
	// broker's own dead-letter destination after store succeeded. The
	// delivery is settled as DeadLettered only when it returns nil.
	DeadLetter func(ctx context.Context, d D, p *inbox.DeadLetterParams, store func(*inbox.DeadLetterParams) error) error
}

// Policy is the delivery policy that every transport adapter shares. For
// each batch a transport receives, Process runs the KeyFunc once, hands
// the keyed messages to the inbox client as one batch, judges each failure
// through the Breaker, dead-letters what will never be applied, and
// counts each message's attempts, leaving out the deliveries that were
// not attempts; the transport then acks, terminates, nacks with a delay
// or hands back each delivery by its Settlement. It is safe for
// concurrent use.
type Policy[TTx any, D Carrier] struct {
	cfg     Config[TTx, D]
	logger  *slog.Logger
	breaker *Breaker
	counts  *counts

	pauseMu     sync.Mutex
	pauseUntil  time.Time
	pauseLength time.Duration
}

// NewPolicy returns the Policy of cfg, with a Breaker of its own.
func NewPolicy[TTx any, D Carrier](cfg Config[TTx, D]) (*Policy[TTx, D], error) {
	switch {
	case cfg.Client == nil:
		return nil, errors.New("inboxtransport: NewPolicy: Config.Client is nil")
	case cfg.Handler == nil:
		return nil, errors.New("inboxtransport: NewPolicy: Config.Handler is nil")
	case cfg.Key == nil:
		return nil, errors.New("inboxtransport: NewPolicy: Config.Key is nil")
	}
	if err := inbox.ValidateConsumer(cfg.Consumer); err != nil {
		return nil, fmt.Errorf("inboxtransport: NewPolicy: Config.Consumer: %w", err)
	}
	cfg.MaxDeliveries = max(cfg.MaxDeliveries, 1)
	if cfg.RetryBackoff <= 0 {
		cfg.RetryBackoff = DefaultRetryBackoff
	}
	if cfg.MaxRetryBackoff <= 0 {
		cfg.MaxRetryBackoff = max(DefaultMaxRetryBackoff, cfg.RetryBackoff)
	}
	if cfg.Name == "" {
		cfg.Name = "inboxtransport"
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	b := cfg.Breaker
	if b == nil {
		b = NewBreaker(cfg.Consumer, cfg.Client.Config(), Settings{StreakLimit: cfg.StreakLimit, StreakPause: cfg.StreakPause, Logger: logger})
	}
	return &Policy[TTx, D]{cfg: cfg, logger: logger, breaker: b, counts: newCounts(maxCounted)}, nil
}

// Breaker returns the policy's Breaker.
func (p *Policy[TTx, D]) Breaker() *Breaker { return p.breaker }

// Process processes ds through the inbox as one batch, in order when
// ordered (inbox.Client.ProcessBatchOrdered), and returns what to do with
// each. A transport settles each delivery by its Settlement.Verdict.
func (p *Policy[TTx, D]) Process(ctx context.Context, ds []D, ordered bool) []Settlement {
	out := make([]Settlement, len(ds))
	errs := make([]error, len(ds))
	outcomes := make([]inbox.Outcome, len(ds))
	keyFailed := make([]bool, len(ds))
	batch := make([]inbox.Message, 0, len(ds))
	at := make([]int, 0, len(ds))
	for i, d := range ds {
		dl := d.Delivery()
		keyed, err := p.cfg.Client.Key(p.cfg.Key, dl.Message)
		if err != nil {
			errs[i] = fmt.Errorf("%s: key of message %s: %w", p.cfg.Name, dl.Message.Source, err)
			keyFailed[i] = true
			p.fill(dl)
			continue
		}
		dl.Message = keyed
		p.fill(dl)
		batch = append(batch, dl.Message)
		at = append(at, i)
	}
	// A failure whose handler ran while the streak breaker was open is
	// no attempt, even when another worker's success closes the breaker
	// before it is judged.
	tripped := p.breaker.isTripped()
	if len(batch) > 0 {
		var results []inbox.BatchResult
		var err error
		if ordered {
			results, err = p.cfg.Client.ProcessBatchOrdered(ctx, p.cfg.Consumer, batch, p.cfg.Handler)
		} else {
			results, err = p.cfg.Client.ProcessBatch(ctx, p.cfg.Consumer, batch, p.cfg.Handler)
		}
		for k, i := range at {
			if err != nil {
				errs[i] = err
			} else {
				errs[i], outcomes[i] = results[k].Err, results[k].Outcome
			}
		}
	}
	cancelled := ctx.Err() != nil

	unavailable, committed := false, false
	// blocked: in order, an earlier delivery is neither done nor
	// dead-lettered.
	blocked := false
	for i, d := range ds {
		dl := d.Delivery()
		track := dl.track()
		attempt := p.attempt(dl)
		err := errs[i]
		if ordered && blocked && keyFailed[i] {
			// Its turn has not come: dead-lettering it now would do it
			// again when the batch is tried again.
			err = fmt.Errorf("%w: %w", inbox.ErrNotAttempted, err)
		}
		v, dec := p.judge(ctx, dl.Message, err, attempt, cancelled, tripped)
		s := Settlement{Verdict: v, Err: err, Fault: dec.Fault, Attempt: attempt}
		switch v {
		case Ack:
			committed = true
			p.breaker.Succeeded(ctx)
			p.counts.forget(track)
			s.Outcome = outcomes[i]
		case Requeue, Release:
			// Handed back unprocessed: its next delivery is no attempt
			// of this one's.
			p.counts.excuse(track)
		case DeadLettered:
			attempts := attempt
			if keyFailed[i] {
				attempts = 0 // the handler never ran
			}
			if derr := p.DeadLetter(ctx, d, dec.Reason, err, attempts); derr != nil {
				p.counts.excuse(track)
				if p.cfg.AbandonOnCancel && ctx.Err() != nil {
					// Abandoned: the failure is the cancellation's.
					s.Verdict, s.Err = Release, derr
					break
				}
				// The store's failure, logged once per outage by the
				// breaker.
				dd := p.breaker.Decide(ctx, dl.Message, derr, 0, 0)
				p.logger.DebugContext(ctx, p.cfg.Name+": could not dead-letter a message; it will be retried",
					"source", dl.Message.Source.String(), "reason", dec.Reason, "err", derr)
				unavailable = unavailable || dd.Fault == inbox.FaultStore || dd.Fault == inbox.FaultSystemic
				s.Verdict, s.Err, s.Fault, s.Delay = Retry, derr, dd.Fault, p.delay(dl)
				break
			}
			p.counts.forget(track)
			s.Reason, s.Attempt = dec.Reason, attempts
		case Retry:
			s.Delay = p.delay(dl)
			if dec.Action == ActionRetry {
				p.counts.fail(track)
				s.Attempted = true
				p.logger.WarnContext(ctx, p.cfg.Name+": message failed; it will be retried",
					"source", dl.Message.Source.String(), "id", dl.Message.ID, "attempt", attempt, "err", err)
				break
			}
			// Not an attempt: the store's fault (logged once per outage
			// by the breaker), a dependency's, a concurrent delivery's,
			// or the streak breaker is open.
			p.counts.excuse(track)
			unavailable = unavailable || dec.Fault == inbox.FaultStore || dec.Fault == inbox.FaultSystemic
		}
		blocked = blocked || (s.Verdict != Ack && s.Verdict != DeadLettered)
		out[i] = s
	}
	p.pauseFor(unavailable && !committed)
	return out
}

// judge says what becomes of a delivery of msg whose processing returned
// err, on its attempt-th attempt. cancelled tells that the processing
// context was cancelled (a shutdown), which says nothing about the
// message; tripped, that the streak breaker was open when the processing
// began, so that a failure of the message's own is no attempt. The
// Decision is the Breaker's, with Retry and DeadLettered.
func (p *Policy[TTx, D]) judge(ctx context.Context, msg inbox.Message, err error, attempt int, cancelled, tripped bool) (Verdict, Decision) {
	switch {
	case err == nil:
		return Ack, Decision{}
	case errors.Is(err, inbox.ErrNotAttempted):
		return Requeue, Decision{Fault: inbox.FaultContention}
	case cancelled:
		return Release, Decision{Fault: inbox.Judge(err)}
	}
	d := p.breaker.Decide(ctx, msg, err, attempt, p.cfg.MaxDeliveries)
	if tripped && d.Fault == inbox.FaultMessage && !d.Tripped {
		// The breaker closed while the handler ran: the failure belongs
		// to the streak, as if it had been judged at once.
		d = Decision{Action: ActionHold, Fault: d.Fault, Tripped: true}
	}
	if d.Action == ActionDeadLetter {
		return DeadLettered, d
	}
	return Retry, d
}

// DeadLetter stores d's message as a dead letter with reason, cause and
// attempts, through Config.DeadLetter when it is set. A transport calls it
// for a dead letter it decides itself, such as a message that crashed its
// consumer; Process calls it for the rest.
func (p *Policy[TTx, D]) DeadLetter(ctx context.Context, d D, reason string, cause error, attempts int) error {
	if !p.cfg.AbandonOnCancel {
		ctx = context.WithoutCancel(ctx)
	}
	sctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	params := &inbox.DeadLetterParams{
		Consumer: p.cfg.Consumer,
		Message:  d.Delivery().Message,
		Reason:   reason,
		Err:      cause,
		Attempts: attempts,
	}
	store := func(params *inbox.DeadLetterParams) error { return p.cfg.Client.DeadLetter(sctx, *params) }
	if p.cfg.DeadLetter != nil {
		return p.cfg.DeadLetter(sctx, d, params, store)
	}
	return store(params)
}

// settleTimeout bounds a dead-letter write, which runs even after the
// processing context is done.
const settleTimeout = 10 * time.Second

// fill reads the broker's count of dl once, and sets what the broker left
// unknown from this process's counts.
func (p *Policy[TTx, D]) fill(dl *Delivery) {
	if !dl.filled {
		dl.filled, dl.broker = true, dl.Message.Source.Attempt
	}
	failed, excused := p.counts.get(dl.track())
	if dl.broker <= 0 {
		dl.Message.Source.Attempt = failed + 1
	}
	if failed+excused > 0 {
		dl.Message.Source.Redelivered = true
	}
}

// attempt is the attempt dl counts as: the broker's delivery count less
// the deliveries this process excused (they were no attempts), or one more
// than the failures this process counted, whichever is more; so at least
// 1, for this delivery is an attempt whatever the counts say. On the
// broker's last delivery it is at least MaxDeliveries.
func (p *Policy[TTx, D]) attempt(dl *Delivery) int {
	failed, excused := p.counts.get(dl.track())
	n := max(dl.broker-excused, failed+1)
	if dl.Last {
		n = max(n, p.cfg.MaxDeliveries)
	}
	return n
}

// delay is the backoff of dl after a failure: RetryBackoff doubled per
// earlier delivery, capped.
func (p *Policy[TTx, D]) delay(dl *Delivery) time.Duration {
	return retryDelay(p.cfg.RetryBackoff, p.cfg.MaxRetryBackoff, max(dl.Message.Source.Attempt, 1))
}

// retryDelay is the backoff of a message that failed on its delivered-th
// delivery: base doubled per earlier delivery, capped at maxDelay.
func retryDelay(base, maxDelay time.Duration, delivered int) time.Duration {
	d := base
	for i := 1; i < delivered && d > 0 && d < maxDelay; i++ {
		d *= 2
	}
	return min(d, maxDelay)
}

func (dl *Delivery) track() string {
	if dl.Track != "" {
		return dl.Track
	}
	return dl.Message.ID
}

// pauseFor pauses Wait after the store was found unavailable, for
// RetryBackoff, doubling while it stays unavailable; false resets it.
func (p *Policy[TTx, D]) pauseFor(unavailable bool) {
	p.pauseMu.Lock()
	defer p.pauseMu.Unlock()
	if !unavailable {
		p.pauseLength = 0
		return
	}
	if p.pauseLength == 0 {
		p.pauseLength = p.cfg.RetryBackoff
	} else {
		p.pauseLength = min(p.pauseLength*2, p.cfg.MaxRetryBackoff)
	}
	p.pauseUntil = time.Now().Add(p.pauseLength)
}

// Paused returns how much longer a transport waits before it takes more
// messages: the pause after the store was found unavailable, or the
// streak breaker's.
func (p *Policy[TTx, D]) Paused() time.Duration {
	p.pauseMu.Lock()
	d := time.Until(p.pauseUntil)
	p.pauseMu.Unlock()
	return max(d, p.breaker.Paused(), 0)
}

// Wait waits out Paused, or until ctx is done.
func (p *Policy[TTx, D]) Wait(ctx context.Context) {
	if d := p.Paused(); d > 0 {
		transportkit.Sleep(ctx, d)
	}
}
