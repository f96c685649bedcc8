package inboxtransport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/internal/fault"
	"github.com/txinbox/inbox/internal/transportkit"
)

// ErrClosed is what a consumer's Run returns when the broker client under
// it was closed: nothing can be received or acknowledged any more. A
// Source's Receive returns an error wrapping it to say so.
var ErrClosed = errors.New("inboxtransport: the broker client was closed")

// ErrRunTwice is what a consumer's Run returns when it was called before:
// a consumer runs once (see Loop.Run). Make a new consumer to run again.
var ErrRunTwice = errors.New("inboxtransport: Run was already called: a consumer runs once; make a new one to run again")

// ErrNotHeld is what Extender.Extend returns, wrapped, when the broker no
// longer holds the delivery for this consumer (its visibility timeout ran
// out, or it was settled by another): the loop stops extending it, and the
// inbox makes its redelivery to another consumer a skip, or waits for this
// one's claim.
var ErrNotHeld = errors.New("inboxtransport: the broker no longer holds the delivery for this consumer")

// Source is a transport's broker as a Loop sees it: how to receive, ack,
// reject, retry and release deliveries. A transport adapter implements it,
// and the Loop does the rest: keying, the transaction, judging failures,
// dead letters, settling each delivery once, extending what it holds,
// shutdown and replays. The Loop calls each settling method at most once
// per delivery, and never after the delivery was settled; a settling
// method logs its own failures: a delivery that was not acknowledged
// comes back, and the inbox skips it.
type Source[D Carrier] interface {
	// Receive waits for deliveries and returns up to n of them, or none
	// when ctx is done or a wait ran out. It may return deliveries with an
	// error: the Loop processes them, then backs off. An error that
	// wraps ErrClosed stops the consumer.
	Receive(ctx context.Context, n int) ([]D, error)
	// Ack acknowledges ds: their transactions committed, or they were
	// duplicates.
	Ack(ctx context.Context, ds []D)
	// Reject settles d, which is stored as a dead letter with reason: the
	// broker must not deliver it again (JetStream's Term, an SQS delete,
	// a RabbitMQ Nack without requeue, a Kafka offset moved past it).
	Reject(ctx context.Context, d D, reason string)
	// Retry hands d back to be delivered again after delay, at the
	// earliest.
	Retry(ctx context.Context, d D, delay time.Duration)
	// Release hands ds back unprocessed, to be delivered again at once,
	// to this consumer or another.
	Release(ctx context.Context, ds []D)
}

// Extender is implemented by a Source whose broker takes a delivery back
// from a consumer that holds it too long (an SQS visibility timeout, a
// JetStream AckWait): Extend keeps d from being delivered again for
// another while. The Loop calls it for each delivery it holds, from its
// receipt until it is settled, every ExtendInterval.
type Extender[D Carrier] interface {
	Extend(ctx context.Context, d D) error
	// ExtendInterval is how long a held delivery goes without an
	// extension before it is extended again; 0 extends nothing. The
	// Loop asks once, after Start.
	ExtendInterval() time.Duration
}

// Starter is implemented by a Source that must check its broker before
// the Loop starts receiving (a JetStream consumer's configuration). An
// error from Start is what Run returns.
type Starter interface {
	Start(ctx context.Context) error
}

// Stopper is implemented by a Source that holds resources for as long as
// the Loop runs (a RabbitMQ connection): Stop is called once Run's
// workers have ended, and every delivery that the Loop did not settle is
// the Source's to hand back.
type Stopper interface {
	Stop()
}

// Result is what a consumer did with one delivery on one try. The
// OnResult callback of each transport's Config receives it.
type Result struct {
	// Message is the message: its ID is "" when its KeyFunc found none,
	// or a malformed one; its Source holds the broker's coordinates.
	Message inbox.Message
	// Outcome is inbox.Applied or inbox.Duplicate when the message was
	// processed, and zero otherwise.
	Outcome inbox.Outcome
	// Err is why the message was not processed, or nil.
	Err error
	// Fault is whose fault Err is (inbox.Judge); FaultNone without Err.
	Fault inbox.Fault
	// Attempts is how many times the message's handler has failed with
	// an error of its own, counting this try.
	Attempts int
	// DeadLettered reports that the message was stored as a dead letter,
	// with Reason, and settled so that the broker does not deliver it
	// again.
	DeadLettered bool
	Reason       string
}

// Receive errors pause a receiver, doubling from the first to the last,
// unless the LoopConfig says otherwise.
const (
	defaultReceiveBackoff    = 100 * time.Millisecond
	defaultMaxReceiveBackoff = 10 * time.Second
)

// LoopConfig configures a Loop. Client, Handler, Consumer and Key are
// required.
type LoopConfig[TTx any, D Carrier] struct {
	Client   *inbox.Client[TTx]
	Handler  inbox.Handler[TTx]
	Consumer string
	Key      inbox.KeyFunc
	// Name prefixes the loop's logs and errors, such as "inboxsqs".
	Name string
	// Settings are the transport's Config's shared knobs; zero values
	// take their defaults.
	Settings
	// Ordered processes each batch in order
	// (inbox.Client.ProcessBatchOrdered): a delivery that fails holds
	// back those after it, which are not attempted.
	Ordered bool
	// RetryInPlace tries a delivery that is to be retried again in place,
	// after its backoff, with those after it in its batch, instead of
	// handing it back to the broker: for a broker that cannot hold a
	// message back in its place (a Kafka partition, a RabbitMQ queue,
	// which requeues to the back).
	RetryInPlace bool
	// ReceiveBackoff and MaxReceiveBackoff bound the pause after a
	// receive failed, which doubles while receives fail. Default to
	// 100ms and 10s.
	ReceiveBackoff    time.Duration
	MaxReceiveBackoff time.Duration
	// AbandonOnCancel, Breaker and DeadLetter are the Policy's (Config).
	AbandonOnCancel bool
	Breaker         *Breaker
	DeadLetter      func(ctx context.Context, d D, p *inbox.DeadLetterParams, store func(*inbox.DeadLetterParams) error) error
}

// Loop is the delivery loop that every transport adapter runs. Each of
// its workers receives a batch from the Source, keys it, claims and
// handles it in one transaction through the Policy, and settles each
// delivery by its verdict, once, after the commit: ack, reject (dead
// letter), retry after a delay, or release. While a worker's batch
// commits, its next batch is already being received: at most one batch
// ahead per worker, held (and extended) like the one in flight, and never
// acknowledged before its own commit. Meanwhile the loop extends what it
// holds (Extender) and processes the dead letters marked for replay. When
// Run's context is done it stops receiving, releases what it received
// and did not start, and gives the batches in flight ShutdownTimeout to
// finish.
type Loop[TTx any, D Carrier] struct {
	cfg    LoopConfig[TTx, D]
	policy *Policy[TTx, D]
	held   heldSet[D]
	ran    atomic.Bool
	// ledger marks the suspects while they run (Settings.MaxCrashes), one
	// at a time across the consumer (suspects): a process that a suspect
	// takes down then takes no other marked message down with it.
	ledger   *Ledger
	suspects sync.Mutex
	// sequential: a worker receives its next batch only once the current
	// one is settled (ReceiveAhead).
	sequential bool
}

// heldSet is the set of deliveries a Loop holds, from their receipt until
// each is settled.
type heldSet[D Carrier] struct {
	mu sync.Mutex
	m  map[*Delivery]D
}

func (h *heldSet[D]) Add(ds ...D) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = make(map[*Delivery]D)
	}
	for _, d := range ds {
		h.m[d.Delivery()] = d
	}
}

func (h *heldSet[D]) Remove(d D) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.m, d.Delivery())
}

func (h *heldSet[D]) All() []D {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]D, 0, len(h.m))
	for _, d := range h.m {
		out = append(out, d)
	}
	return out
}

// NewLoop returns the Loop of cfg. Its errors are prefixed with cfg.Name,
// as the transport's New returns them.
func NewLoop[TTx any, D Carrier](cfg LoopConfig[TTx, D]) (*Loop[TTx, D], error) {
	switch {
	case cfg.Client == nil:
		return nil, fmt.Errorf("%s: New: inbox client is nil", cfg.Name)
	case cfg.Handler == nil:
		return nil, fmt.Errorf("%s: New: handler is nil", cfg.Name)
	}
	cfg.Settings = cfg.Settings.WithDefaults()
	if err := cfg.Settings.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.Name, err)
	}
	p, err := NewPolicy(Config[TTx, D]{
		Client:          cfg.Client,
		Handler:         cfg.Handler,
		Consumer:        cfg.Consumer,
		Key:             cfg.Key,
		MaxDeliveries:   cfg.MaxDeliveries,
		RetryBackoff:    cfg.RetryBackoff,
		MaxRetryBackoff: cfg.MaxRetryBackoff,
		StreakLimit:     cfg.StreakLimit,
		StreakPause:     cfg.StreakPause,
		Name:            cfg.Name,
		Logger:          cfg.Logger,
		AbandonOnCancel: cfg.AbandonOnCancel,
		Breaker:         cfg.Breaker,
		DeadLetter:      cfg.DeadLetter,
	})
	if err != nil {
		return nil, err
	}
	cfg.Name = p.cfg.Name
	if cfg.ReceiveBackoff <= 0 {
		cfg.ReceiveBackoff = defaultReceiveBackoff
	}
	if cfg.MaxReceiveBackoff <= 0 {
		cfg.MaxReceiveBackoff = max(defaultMaxReceiveBackoff, cfg.ReceiveBackoff)
	}
	l := &Loop[TTx, D]{cfg: cfg, policy: p}
	if cfg.MaxCrashes > 0 {
		if l.ledger, err = NewLedger(cfg.Client, cfg.Consumer); err != nil {
			return nil, fmt.Errorf("%s: %w", cfg.Name, err)
		}
	}
	return l, nil
}

// Policy returns the loop's Policy.
func (l *Loop[TTx, D]) Policy() *Policy[TTx, D] { return l.policy }

// Breaker returns the loop's Breaker.
func (l *Loop[TTx, D]) Breaker() *Breaker { return l.policy.breaker }

// Logger returns the loop's logger: Settings.Logger, or a silent one.
func (l *Loop[TTx, D]) Logger() *slog.Logger { return l.policy.logger }

// ReceiveAhead turns receiving ahead on (the default) or off: off, a
// worker receives its next batch only once the current one is settled,
// and the broker and the store wait for each other. It is for measuring
// what receiving ahead gains; call it before Run.
func (l *Loop[TTx, D]) ReceiveAhead(on bool) { l.sequential = !on }

// SetMaxDeliveries sets the policy's MaxDeliveries, for a Source that
// reads the bound from its broker in Start (a JetStream consumer's own
// MaxDeliver). Call it from Start only.
func (l *Loop[TTx, D]) SetMaxDeliveries(n int) {
	l.policy.cfg.MaxDeliveries = max(n, 1)
}

// Run runs the loop over src until ctx is done, then shuts down
// gracefully, and returns nil once every goroutine it started has ended
// (or src's Start error, or ErrClosed when src's client was closed). A
// Loop runs once: a second call returns ErrRunTwice.
func (l *Loop[TTx, D]) Run(ctx context.Context, src Source[D]) error {
	return l.RunFunc(ctx, src, func(ctx, work context.Context, stop func(error)) {
		l.workers(ctx, work, src, stop)
	})
}

// RunFunc runs schedule inside the loop's frame, for a transport that
// schedules its deliveries itself (Kafka's partitions, SQS FIFO's message
// groups) with Poll and Handle: the Run guard, src's Start, the work
// context (ctx's values, cancelled ShutdownTimeout after ctx is done), the
// extension of held deliveries, the replays, src's Stop. schedule returns
// when ctx is done and its work has ended; it calls stop to end the run
// early with an error, such as ErrClosed. src may be nil.
func (l *Loop[TTx, D]) RunFunc(ctx context.Context, src Source[D], schedule func(ctx, work context.Context, stop func(error))) error {
	if !l.ran.CompareAndSwap(false, true) {
		return ErrRunTwice
	}
	if s, ok := src.(Starter); ok {
		if err := s.Start(ctx); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var stopOnce sync.Once
	var stopErr error
	stop := func(err error) {
		stopOnce.Do(func() { stopErr = err })
		cancel()
	}

	work, finish := workContext(ctx, max(l.cfg.ShutdownTimeout, 0))
	defer finish()
	side, stopSide := context.WithCancel(work)
	var wg sync.WaitGroup
	if x, ok := src.(Extender[D]); ok && x.ExtendInterval() > 0 {
		goWG(&wg, func() { l.extend(side, x, x.ExtendInterval()) })
	}
	if l.cfg.ReplayInterval > 0 {
		goWG(&wg, func() { l.replays(ctx, side) })
	}
	schedule(ctx, work, stop)
	stopSide()
	wg.Wait()
	if src != nil {
		if rest := l.held.All(); len(rest) > 0 {
			l.Release(work, src, rest...)
		}
		if s, ok := src.(Stopper); ok {
			s.Stop()
		}
	}
	return stopErr
}

// workers runs Workers workers, each with a receiver that fetches its
// next batch while it processes the current one.
func (l *Loop[TTx, D]) workers(ctx, work context.Context, src Source[D], stop func(error)) {
	var wg sync.WaitGroup
	for range l.cfg.Workers {
		next := make(chan []D)
		// settled holds a token while the worker may receive: at once,
		// receiving ahead; else once the current batch is settled.
		settled := make(chan struct{}, 1)
		settled <- struct{}{}
		holding := false // the receiver holds the token (Poll's goroutine only)
		want := func() int {
			if l.sequential && !holding {
				select {
				case <-settled:
					holding = true
				case <-ctx.Done():
					return 0
				}
			}
			return l.cfg.MaxBatch
		}
		goWG(&wg, func() {
			defer close(next)
			err := l.Poll(ctx, src, want, func(ds []D) {
				holding = false // the worker gives it back
				select {
				case next <- ds:
				case <-ctx.Done():
					// Received as the consumer stopped: let them go.
					l.Release(work, src, ds...)
				}
			})
			if err != nil {
				stop(err)
			}
		})
		goWG(&wg, func() {
			for ds := range next {
				if ctx.Err() != nil {
					l.Release(work, src, ds...)
				} else {
					l.process(ctx, work, src, ds)
				}
				if l.sequential {
					settled <- struct{}{}
				}
			}
		})
	}
	wg.Wait()
}

// process handles ds, and with RetryInPlace tries what is to be retried
// again after its backoff, until it is settled or the consumer stops. An
// unordered transport's deliveries that were not attempted are released.
func (l *Loop[TTx, D]) process(ctx, work context.Context, src Source[D], ds []D) {
	for len(ds) > 0 {
		h := l.Handle(work, src, ds)
		ds = h.Again
		if len(ds) == 0 {
			return
		}
		if !l.cfg.RetryInPlace || ctx.Err() != nil {
			l.Release(work, src, ds...)
			return
		}
		// Not retried: an earlier delivery was dead-lettered, and the
		// rest go on at once. Retried: wait its backoff, and while the
		// streak breaker is open, its pause too.
		if h.Retried && !transportkit.Sleep(ctx, max(h.Wait, l.policy.breaker.Paused())) {
			l.Release(work, src, ds...)
			return
		}
	}
}

// Poll receives from src until ctx is done: it waits out the policy's
// pause (a store outage, an open streak breaker), asks for want()
// deliveries (none when want returns 0), holds what it receives, and hands
// it to got. A failed receive is logged and tried again after a backoff.
// It returns nil when ctx is done, and the error when src's client was
// closed (ErrClosed).
func (l *Loop[TTx, D]) Poll(ctx context.Context, src Source[D], want func() int, got func([]D)) error {
	backoff := l.cfg.ReceiveBackoff
	for {
		l.policy.Wait(ctx)
		if ctx.Err() != nil {
			return nil
		}
		n := want()
		if ctx.Err() != nil || n <= 0 {
			return nil
		}
		ds, err := src.Receive(ctx, n)
		if len(ds) > 0 {
			now := time.Now()
			for _, d := range ds {
				d.Delivery().extended = now
			}
			l.held.Add(ds...)
			got(ds)
		}
		switch {
		case err == nil:
			backoff = l.cfg.ReceiveBackoff
		case errors.Is(err, ErrClosed):
			return err
		case ctx.Err() != nil:
			return nil
		default:
			l.policy.logger.WarnContext(ctx, l.cfg.Name+": receive failed; trying again", "backoff", backoff, "err", err)
			transportkit.Sleep(ctx, backoff)
			backoff = min(backoff*2, l.cfg.MaxReceiveBackoff)
		}
	}
}

// Handled is what became of a batch in Handle.
type Handled[D Carrier] struct {
	// Done is how many deliveries from the start of the batch were
	// settled as done: acknowledged or dead-lettered.
	Done int
	// Again are the deliveries left unsettled, in their order: those an
	// ordered batch did not attempt and, with RetryInPlace, those to
	// retry. The caller tries them again or releases them.
	Again []D
	// Retried reports that a delivery failed and is to be retried,
	// and Wait is the longest backoff of those.
	Retried bool
	Wait    time.Duration
}

// Handle processes ds as one batch through the Policy and settles each
// delivery by its verdict, once: it acknowledges what committed and
// rejects what was dead-lettered (after the fault point
// AfterCommitBeforeAck), retries what may succeed later (in place with
// RetryInPlace, else through src.Retry after its delay), releases what
// shutdown cancelled, and returns the rest. A suspect (Settings.MaxCrashes)
// runs alone, marked in the takeover ledger (handleSuspect); the
// deliveries between suspects run as batches, in their order. Ordered,
// what follows a delivery that is not done is not attempted.
func (l *Loop[TTx, D]) Handle(ctx context.Context, src Source[D], ds []D) Handled[D] {
	if l.ledger == nil {
		return l.handle(ctx, src, ds, nil)
	}
	var h Handled[D]
	done := true // every delivery so far is done
	// add merges ph, the result of part, into h, and reports whether
	// the rest may go on: ordered, what follows a delivery that is not
	// done is handed back unprocessed, its next delivery no attempt of
	// this one's.
	add := func(part []D, ph Handled[D], rest []D) bool {
		if done {
			h.Done += ph.Done
		}
		done = done && ph.Done == len(part)
		h.Again = append(h.Again, ph.Again...)
		h.Retried, h.Wait = h.Retried || ph.Retried, max(h.Wait, ph.Wait)
		if l.cfg.Ordered && !done && len(rest) > 0 {
			for _, d := range rest {
				l.policy.counts.excuse(d.Delivery().track())
			}
			h.Again = append(h.Again, rest...)
			return false
		}
		return true
	}
	for len(ds) > 0 {
		n, source := 0, ""
		for ; n < len(ds); n++ {
			var ok bool
			if source, ok = l.suspect(ds[n]); ok {
				break
			}
		}
		if n > 0 {
			if !add(ds[:n], l.handle(ctx, src, ds[:n], nil), ds[n:]) {
				break
			}
			ds = ds[n:]
		}
		if len(ds) > 0 {
			if !add(ds[:1], l.handleSuspect(ctx, src, ds[0], source), ds[1:]) {
				break
			}
			ds = ds[1:]
		}
	}
	return h
}

// handle is Handle of a batch without suspects, or of one suspect. It
// calls processed, when it is not nil, once the batch's transaction has
// ended and before any delivery is settled.
func (l *Loop[TTx, D]) handle(ctx context.Context, src Source[D], ds []D, processed func()) Handled[D] {
	var h Handled[D]
	ss := l.policy.Process(ctx, ds, l.cfg.Ordered)
	if processed != nil {
		processed()
	}
	var ack, release []D
	injected := false
	prefix := true
	for i, s := range ss {
		d := ds[i]
		l.report(d, s)
		switch s.Verdict {
		case Ack, DeadLettered:
			if !injected {
				// The messages are in the database (or the dead-letter
				// store); the broker does not know yet.
				fault.Inject(ctx, fault.AfterCommitBeforeAck)
				injected = true
			}
			if prefix {
				h.Done++
			}
			if s.Verdict == Ack {
				ack = append(ack, d)
			} else if l.settle(d) {
				src.Reject(ctx, d, s.Reason)
			}
			continue
		case Retry:
			h.Retried, h.Wait = true, max(h.Wait, s.Delay)
			if !l.cfg.RetryInPlace {
				if l.settle(d) {
					src.Retry(ctx, d, s.Delay)
				}
				break
			}
			h.Again = append(h.Again, d)
		case Requeue:
			h.Again = append(h.Again, d)
		default:
			release = append(release, d)
		}
		prefix = false
	}
	if ack = l.settleAll(ack); len(ack) > 0 {
		src.Ack(ctx, ack)
	}
	l.Release(ctx, src, release...)
	return h
}

// report calls OnResult with what became of d; a delivery handed back
// unprocessed is not reported.
func (l *Loop[TTx, D]) report(d D, s Settlement) {
	if l.cfg.OnResult == nil {
		return
	}
	r := Result{Message: d.Delivery().Message, Err: s.Err, Fault: s.Fault}
	switch s.Verdict {
	case Ack:
		r.Outcome, r.Attempts = s.Outcome, s.Attempt-1
	case DeadLettered:
		r.DeadLettered, r.Reason, r.Attempts = true, s.Reason, s.Attempt
	case Retry:
		r.Attempts = s.Attempt
		if !s.Attempted {
			r.Attempts--
		}
	default:
		return
	}
	l.cfg.OnResult(r)
}

// Report calls OnResult with r, for a delivery the transport settled
// itself (a record that crashed its consumer).
func (l *Loop[TTx, D]) Report(r Result) {
	if l.cfg.OnResult != nil {
		l.cfg.OnResult(r)
	}
}

// Release settles ds as handed back unprocessed, through src.Release,
// except those already settled.
func (l *Loop[TTx, D]) Release(ctx context.Context, src Source[D], ds ...D) {
	if ds = l.settleAll(ds); len(ds) > 0 {
		src.Release(ctx, ds)
	}
}

// RetryAfter settles d as handed back to be delivered again after delay,
// through src.Retry, unless it was settled already.
func (l *Loop[TTx, D]) RetryAfter(ctx context.Context, src Source[D], d D, delay time.Duration) {
	if l.settle(d) {
		src.Retry(ctx, d, delay)
	}
}

// settleAll settles each of ds and returns those that were not settled
// before, in place.
func (l *Loop[TTx, D]) settleAll(ds []D) []D {
	out := ds[:0]
	for _, d := range ds {
		if l.settle(d) {
			out = append(out, d)
		}
	}
	return out
}

// settle marks d settled and lets it go from the held set, waiting for an
// extension in progress on it, so that none is sent afterwards. It reports
// whether d was still unsettled.
func (l *Loop[TTx, D]) settle(d D) bool {
	dl := d.Delivery()
	dl.mu.Lock()
	defer dl.mu.Unlock()
	if dl.settled {
		return false
	}
	dl.settled = true
	l.held.Remove(d)
	return true
}

// extend extends the held deliveries until ctx is done. It looks twice
// per ExtendInterval, so a delivery is extended at most one and a half
// intervals after its receipt or its last extension.
func (l *Loop[TTx, D]) extend(ctx context.Context, x Extender[D], every time.Duration) {
	tick := time.NewTicker(max(every/2, time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		cutoff := time.Now().Add(-every)
		for _, d := range l.held.All() {
			if ctx.Err() != nil {
				return
			}
			l.extendOne(ctx, x, d, cutoff, every)
		}
	}
}

// extendOne extends d, unless it was settled or extended since cutoff.
func (l *Loop[TTx, D]) extendOne(ctx context.Context, x Extender[D], d D, cutoff time.Time, every time.Duration) {
	dl := d.Delivery()
	dl.mu.Lock()
	defer dl.mu.Unlock()
	if dl.settled || dl.lost || dl.extended.After(cutoff) {
		return
	}
	start := time.Now()
	// A hung call must not hold up the other deliveries' extensions for
	// longer than an interval.
	cctx, cancel := context.WithTimeout(ctx, every)
	defer cancel()
	err := x.Extend(cctx, d)
	switch {
	case err == nil:
		dl.extended = start
	case ctx.Err() != nil:
	case errors.Is(err, ErrNotHeld):
		dl.lost = true
		l.policy.logger.WarnContext(ctx, l.cfg.Name+": lost a held message: it may be delivered again",
			"source", dl.Message.Source.String(), "err", err)
	default:
		l.policy.logger.WarnContext(ctx, l.cfg.Name+": could not extend a held message: it may be delivered again",
			"source", dl.Message.Source.String(), "err", err)
	}
}

// replays processes the dead letters marked for replay every
// ReplayInterval, from the start, until ctx is done; each call runs on
// work, so that a shutdown lets it finish.
func (l *Loop[TTx, D]) replays(ctx, work context.Context) {
	c := l.policy.cfg
	for {
		results, err := c.Client.ProcessReplays(work, c.Consumer, c.Handler)
		for _, r := range results {
			l.policy.logger.InfoContext(ctx, c.Name+": replayed a dead letter",
				"dead_letter", r.DeadLetter.ID, "id", r.DeadLetter.MessageID, "outcome", r.Outcome, "err", r.Err)
		}
		switch {
		case errors.Is(err, inbox.ErrReplayUnsupported):
			l.policy.logger.DebugContext(ctx, c.Name+": the store keeps no replay requests; replays are off", "err", err)
			return
		case err != nil && ctx.Err() == nil:
			l.policy.logger.WarnContext(ctx, c.Name+": could not process the dead letters marked for replay; trying again", "err", err)
		}
		if len(results) >= inbox.MaxReplayPerCall && err == nil {
			continue
		}
		if !transportkit.Sleep(ctx, l.cfg.ReplayInterval) {
			return
		}
	}
}

// goWG runs f on a goroutine that wg waits for.
func goWG(wg *sync.WaitGroup, f func()) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		f()
	}()
}
