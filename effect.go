package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxtype"
	"github.com/txinbox/inbox/internal/effectctx"
	"github.com/txinbox/inbox/internal/fault"
)

// EffectFunc performs one remote call, such as a card capture, and returns
// its result, such as the provider's capture id, for the effects ledger to
// keep. It must send key as the provider's idempotency key. ctx carries the
// key too, for inboxhttp.Transport.
//
// An error means the outcome is unknown (a timeout, a 5xx, a broken
// connection): the step stays started. Wrap the error with NoEffect when
// the call certainly did not take effect, such as a connection refused or a
// 4xx that the provider documents as changing nothing.
type EffectFunc func(ctx context.Context, key string) ([]byte, error)

// EffectOpts are the options of one step of Client.Effect. The zero value,
// and nil, declare a provider that honours the idempotency key.
type EffectOpts struct {
	// NonIdempotent declares that the provider does not honour the
	// idempotency key: calling it twice may apply the effect twice. A step
	// found started but never done is then not called again: Effect returns
	// ErrUnknownOutcome, and the message is parked in the dead-letter store
	// for a human. Defaults to false: the provider deduplicates by key, so
	// such a step is called again with the same key.
	NonIdempotent bool
}

// MaxStepLen is the longest step name, in bytes.
const MaxStepLen = inboxdriver.MaxStepLen

type consumerKey struct{}

// WithConsumer returns a context that names consumer, for Client.Effect.
// Process, ProcessBatch and ProcessBatchOrdered already pass such a context
// to the handler; use WithConsumer with ClaimTx, where the caller runs the
// transaction.
func WithConsumer(ctx context.Context, consumer string) context.Context {
	return context.WithValue(ctx, consumerKey{}, consumer)
}

// ConsumerFromContext returns the consumer that ctx names, as the context
// that Process passes to a handler does.
func ConsumerFromContext(ctx context.Context) (string, bool) {
	c, ok := ctx.Value(consumerKey{}).(string)
	return c, ok
}

// EffectKeyFromContext returns the idempotency key of the call that ctx
// belongs to, as the context that Client.Effect passes to an EffectFunc
// does.
func EffectKeyFromContext(ctx context.Context) (string, bool) {
	return effectctx.Key(ctx)
}

// NoEffect marks an error returned by an EffectFunc as a failure that
// certainly did not take effect at the provider: the request was never
// sent, or the provider rejected it before acting. Effect then records the
// attempt as failed, so that a later attempt calls again even when the step
// is NonIdempotent. Any other error leaves the outcome unknown.
// NoEffect(nil) is nil.
func NoEffect(err error) error {
	if err == nil {
		return nil
	}
	return &NoEffectError{Err: err}
}

// NoEffectError is the error NoEffect returns.
type NoEffectError struct {
	Err error
}

func (e *NoEffectError) Error() string { return "no effect: " + e.Err.Error() }

// Unwrap returns the wrapped error.
func (e *NoEffectError) Unwrap() error { return e.Err }

// Effect performs a remote side effect that the database cannot roll back,
// such as a card capture or an email, at most once per consumer, message
// and step as far as the provider allows, and returns its result. Call it
// from a handler, with the handler's ctx (which names the consumer) and
// message:
//
//	capture, err := client.Effect(ctx, msg, "capture", func(ctx context.Context, key string) ([]byte, error) {
//		return payments.Capture(ctx, order, key) // key as the Idempotency-Key
//	}, nil)
//
// It works in three steps, each committed on its own, outside the
// handler's transaction, so that they survive its rollback:
//
//  1. It records the step as started. If the step is already done, from an
//     earlier delivery whose transaction did not commit, it returns the
//     stored result and does not call fn.
//  2. It calls fn with the step's key, EffectKey(consumer, msg.ID, step).
//  3. It records the step as done, with fn's result, so that a redelivery
//     does not call the provider again.
//
// A step found started but not done means an earlier attempt died during or
// after its call. Unless opts declare the step NonIdempotent, fn is called
// again with the same key, and the provider returns its original result.
// For a NonIdempotent step, Effect does not guess: it returns an error
// wrapping ErrUnknownOutcome, which is permanent, and the message goes to
// the dead-letter store with ReasonUnknownOutcome.
//
// The inbox row is the local skip and the provider's key the remote skip:
// once the handler's transaction commits, the message is a Duplicate and
// Effect is not reached again.
//
// The ledger's writes use a connection of their own while the handler's
// transaction holds one: give the store's pool more connections than the
// handlers that run at once, or Effect waits for one until ctx is done.
//
// Effect returns an error wrapping ErrInvalidConsumer when ctx names no
// consumer, ErrInvalidStep for a bad step name, ErrEffectsUnsupported when
// the store keeps no ledger, and fn's error, wrapped, when the call fails.
func (c *Client[TTx]) Effect(ctx context.Context, msg Message, step string, fn EffectFunc, opts *EffectOpts) ([]byte, error) {
	consumer, ok := ConsumerFromContext(ctx)
	if !ok {
		return nil, fmt.Errorf("%w: Effect needs the consumer: call it with the context Process passes to the handler, or wrap ctx with WithConsumer", ErrInvalidConsumer)
	}
	id, err := c.admin.check(consumer, msg.ID)
	if err != nil {
		return nil, err
	}
	if err := validateStep(step); err != nil {
		return nil, err
	}
	if fn == nil {
		return nil, fmt.Errorf("inbox: effect %s/%s/%s: fn is nil", consumer, id, step)
	}
	if opts == nil {
		opts = &EffectOpts{}
	}
	store, err := c.admin.effectStore()
	if err != nil {
		return nil, err
	}
	where := func() string { return consumer + "/" + id + "/" + step }
	k := inboxdriver.EffectKeyParams{Consumer: consumer, ID: id, Step: step}

	e, started, err := store.EffectBegin(ctx, &inboxdriver.EffectBeginParams{
		EffectKeyParams: k, Now: c.config.Now(), RetryStarted: !opts.NonIdempotent,
	})
	if err != nil {
		return nil, atStage(StageLedger, fmt.Errorf("inbox: effect %s: record started: %w", where(), c.admin.classify(err)))
	}
	if !started {
		if e.State == inboxtype.EffectDone {
			c.logger.DebugContext(ctx, "inbox: effect already done; returning its stored result", "consumer", consumer, "id", id, "step", step)
			return e.Result, nil
		}
		c.logger.WarnContext(ctx, "inbox: effect outcome unknown; not calling again", "consumer", consumer, "id", id, "step", step,
			"attempts", e.Attempts, "started_at", e.StartedAt)
		return nil, fmt.Errorf("inbox: effect %s: %w: attempt %d started at %s and was never recorded done, and the step is declared non-idempotent: check with the provider, then EffectResolve",
			where(), ErrUnknownOutcome, e.Attempts, e.StartedAt.UTC().Format(time.RFC3339))
	}
	if e.Attempts > 1 {
		c.logger.InfoContext(ctx, "inbox: calling an effect again with the same key", "consumer", consumer, "id", id, "step", step, "attempt", e.Attempts)
	}
	fault.Inject(ctx, fault.EffectAfterStarted)

	key := EffectKey(consumer, id, step)
	result, callErr := fn(effectctx.With(ctx, key), key)

	// The call has happened: record its outcome even if ctx was cancelled
	// meanwhile, or a redelivery would find the step started.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ledgerWriteTimeout)
	defer cancel()
	if callErr != nil {
		var ne *NoEffectError
		if errors.As(callErr, &ne) {
			if _, err := store.EffectFailed(wctx, &k); err != nil {
				return nil, errors.Join(fmt.Errorf("inbox: effect %s: call: %w", where(), callErr),
					atStage(StageLedger, fmt.Errorf("record failed: %w", c.admin.classify(err))))
			}
		}
		return nil, fmt.Errorf("inbox: effect %s: call: %w", where(), callErr)
	}
	fault.Inject(ctx, fault.EffectAfterCall)
	ok, err = store.EffectDone(wctx, &inboxdriver.EffectDoneParams{EffectKeyParams: k, Result: result, Now: c.config.Now()})
	if err != nil {
		return nil, atStage(StageLedger, fmt.Errorf("inbox: effect %s: the call succeeded, but recording it done failed: %w", where(), c.admin.classify(err)))
	}
	if !ok {
		return nil, fmt.Errorf("inbox: effect %s: the call succeeded, but its ledger entry was forgotten, purged or resolved while it ran", where())
	}
	return result, nil
}

// ledgerWriteTimeout bounds the ledger write that follows a call.
const ledgerWriteTimeout = 10 * time.Second

func (a *Admin) effectStore() (inboxdriver.EffectStore, error) {
	store, ok := a.driver.(inboxdriver.EffectStore)
	if !ok {
		return nil, fmt.Errorf("%w: %T does not implement inboxdriver.EffectStore", ErrEffectsUnsupported, a.driver)
	}
	return store, nil
}

func validateStep(step string) error {
	if step == "" {
		return fmt.Errorf("%w: empty", ErrInvalidStep)
	}
	if err := checkText(step, MaxStepLen); err != nil {
		return fmt.Errorf("%w: %q: %s", ErrInvalidStep, clip(step), err)
	}
	return nil
}

// EffectList lists entries of the effects ledger, oldest start first.
func (a *Admin) EffectList(ctx context.Context, p inboxtype.EffectListParams) ([]*inboxtype.EffectEntry, error) {
	store, err := a.effectStore()
	if err != nil {
		return nil, err
	}
	if p.Limit <= 0 {
		p.Limit = 100
	}
	if p.Consumer != "" {
		if err := ValidateConsumer(p.Consumer); err != nil {
			return nil, err
		}
	}
	if p.MessageID != "" {
		if p.MessageID, err = a.canonicalID(p.MessageID); err != nil {
			return nil, wrapf(err, "list effects")
		}
	}
	switch p.State {
	case "", inboxtype.EffectStarted, inboxtype.EffectFailed, inboxtype.EffectDone:
	default:
		return nil, fmt.Errorf("inbox: EffectListParams.State %q: want %q, %q or %q", p.State, inboxtype.EffectStarted, inboxtype.EffectFailed, inboxtype.EffectDone)
	}
	es, err := store.EffectList(ctx, &p)
	if err != nil {
		return nil, fmt.Errorf("inbox: list effects: %w", a.classify(err))
	}
	return es, nil
}

// EffectResolveParams settle a step whose outcome is unknown.
type EffectResolveParams struct {
	Consumer  string
	MessageID string
	Step      string
	// State is EffectDone when the provider shows that the call took
	// effect: the next attempt returns Result without calling. It is
	// EffectFailed when the provider shows that it did not: the next
	// attempt calls again.
	State inboxtype.EffectState
	// Result is the result to store with EffectDone, as the call would
	// have returned it.
	Result []byte
}

// EffectResolve settles, for an operator, a step left started, such as one
// that parked its message with ErrUnknownOutcome. Check with the provider
// first; then replay the message's dead letter. It returns an error
// wrapping ErrNotFound when the step is not in state EffectStarted.
func (a *Admin) EffectResolve(ctx context.Context, p EffectResolveParams) error {
	id, err := a.check(p.Consumer, p.MessageID)
	if err != nil {
		return err
	}
	if err := validateStep(p.Step); err != nil {
		return err
	}
	if p.State != inboxtype.EffectDone && p.State != inboxtype.EffectFailed {
		return fmt.Errorf("inbox: EffectResolveParams.State %q: want %q or %q", p.State, inboxtype.EffectDone, inboxtype.EffectFailed)
	}
	store, err := a.effectStore()
	if err != nil {
		return err
	}
	where := p.Consumer + "/" + id + "/" + p.Step
	ok, err := store.EffectResolve(ctx, &inboxdriver.EffectResolveParams{
		EffectKeyParams: inboxdriver.EffectKeyParams{Consumer: p.Consumer, ID: id, Step: p.Step},
		State:           p.State, Result: p.Result, Now: a.config.Now(),
	})
	if err != nil {
		return fmt.Errorf("inbox: resolve effect %s: %w", where, a.classify(err))
	}
	if !ok {
		return fmt.Errorf("inbox: resolve effect %s: no started step: %w", where, ErrNotFound)
	}
	a.logger.InfoContext(ctx, "inbox: effect resolved by an operator", "consumer", p.Consumer, "id", id, "step", p.Step, "state", p.State)
	return nil
}
