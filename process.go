package inbox

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/internal/fault"
)

// Process applies msg for consumer exactly once. In one transaction it:
//
//  1. claims msg.ID for consumer, as the first statement;
//  2. calls h with the transaction, if the claim was new;
//  3. commits.
//
// It returns Applied after the commit. It returns Duplicate, without calling
// h, when consumer had already applied msg.ID; the transaction is rolled
// back. Ack the message in both cases, and only then.
//
// On an error nothing was applied, unless the error wraps ErrUnavailable
// from the commit, whose outcome is unknown. Do not ack: the redelivery is
// either applied or found to be a Duplicate. Serialization failures and
// deadlocks are retried first, as Config.MaxConflictRetries says.
func (c *Client[TTx]) Process(ctx context.Context, consumer string, msg Message, h Handler[TTx]) (Outcome, error) {
	id, err := c.check(consumer, msg.ID)
	if err != nil {
		return 0, err
	}
	msg.ID = id
	return c.processOne(ctx, consumer, msg, h)
}

func (c *Client[TTx]) processOnce(ctx context.Context, consumer string, msg Message, h Handler[TTx]) (out Outcome, err error) {
	ctx, obs := c.observeTx(ctx, consumer, []Message{msg})
	if obs != nil {
		defer func() { obs.end(ctx, []Outcome{out}, err) }()
	}
	params := c.claimParams(consumer, msg.ID)
	ph, pipelinable := h.(PipelinedHandler[TTx])
	pipelinable = pipelinable && c.pipeliner != nil
	paused := pipelinable && c.afterDuplicate(consumer)
	var workErr error
	if paused {
		// Within a run of duplicates a committed row, which only an applied
		// message leaves, answers in one round trip. A message not found
		// is new, or in flight elsewhere: the claim decides.
		seen, err := c.pipeliner.Applied(ctx, params)
		if err != nil {
			return 0, claimFailure(StageClaim, fmt.Errorf("claim: %w", c.classify(err)))
		}
		if seen {
			obs.lap(phaseClaim)
			return Duplicate, nil
		}
		c.duplicates.Delete(consumer) // the run of duplicates has ended
	}
	if pipelinable {
		var work any
		workErr = c.call(ctx, consumer, msg.ID, func(ctx context.Context) error {
			var err error
			work, err = ph.Pipeline(ctx, msg)
			return err
		})
		if workErr == nil {
			return c.processPipelined(ctx, obs, params, work)
		}
	}
	tx, claimed, err := c.driver.BeginClaim(ctx, params)
	obs.lap(phaseClaim)
	if err != nil {
		return 0, claimFailure(StageClaim, fmt.Errorf("claim: %w", c.classify(err)))
	}
	if !claimed {
		c.rollback(ctx, tx)
		return Duplicate, nil
	}
	fault.Inject(ctx, fault.AfterClaim)
	if workErr != nil {
		// A PipelinedHandler that could not describe its work: claimed
		// on its own all the same, so that a duplicate stays a Duplicate.
		err = workErr
	} else {
		err = c.handle(ctx, consumer, h, tx, msg)
	}
	obs.lap(phaseHandler)
	if err != nil {
		c.rollback(ctx, tx)
		return 0, err
	}
	fault.Inject(ctx, fault.AfterEffectBeforeCommit)
	err = c.driver.Commit(ctx, tx)
	obs.lap(phaseCommit)
	if err != nil {
		c.rollback(ctx, tx)
		return 0, atStage(StageCommit, fmt.Errorf("commit: %w", c.classify(err)))
	}
	return Applied, nil
}

// processPipelined sends a message's whole transaction in one round trip: BEGIN,
// the claim, the work a PipelinedHandler described, COMMIT. A duplicate
// stops it at the claim; pipelining then pauses for consumer until a
// message turns out new (see afterDuplicate).
func (c *Client[TTx]) processPipelined(ctx context.Context, obs *txObservation, p *inboxdriver.ClaimParams, work any) (Outcome, error) {
	claimed, workErr, err := c.pipeliner.ProcessPipelined(ctx, p, work)
	obs.lap(phaseCommit)
	switch {
	case err != nil:
		return 0, atStage(StageCommit, fmt.Errorf("pipelined transaction: %w", c.classify(err)))
	case !claimed:
		c.duplicates.Store(p.Consumer, struct{}{})
		return Duplicate, nil
	case workErr != nil:
		// The driver returns the work's failure only while the
		// connection is sound.
		return 0, c.handlerErr(workErr, false)
	}
	return Applied, nil
}

// afterDuplicate reports whether consumer's last pipelined claim found a
// duplicate, with no new message since. Duplicates come in runs (a replay
// after a crash or a rebalance), and a pipelined duplicate costs an error
// on the server, which logs it: during a run, Process looks each message up
// first (Pipeliner.Applied) and batches are claimed on their own, until a
// message or a batch turns out new.
func (c *Client[TTx]) afterDuplicate(consumer string) bool {
	_, ok := c.duplicates.Load(consumer)
	return ok
}

// handle calls h with a context that names consumer (for Client.Effect),
// turning a panic into a PanicError.
func (c *Client[TTx]) handle(ctx context.Context, consumer string, h Handler[TTx], tx TTx, msg Message) error {
	return c.callTx(ctx, consumer, msg.ID, tx, func(ctx context.Context) error { return h.Handle(ctx, tx, msg) })
}

// callTx runs a handler on tx as call does, and asks the driver whether a
// failure left tx's connection broken: then the failure is the store's. A
// context that ended is the caller's (a shutdown, or the handler's own
// deadline), even though the driver may have closed the connection for
// it.
func (c *Client[TTx]) callTx(ctx context.Context, consumer, id string, tx TTx, fn func(ctx context.Context) error) error {
	err := c.run(ctx, consumer, id, fn)
	if err == nil {
		return nil
	}
	ended := errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
	return c.handlerErr(err, !ended && c.driver.TxBroken(ctx, tx, err))
}

// call runs a handler that has no transaction yet (a PipelinedHandler
// describing its work), and tags its error with StageHandler.
func (c *Client[TTx]) call(ctx context.Context, consumer, id string, fn func(ctx context.Context) error) error {
	return c.handlerErr(c.run(ctx, consumer, id, fn), false)
}

// run runs a handler with a context that names consumer, turning a panic
// into a PanicError.
func (c *Client[TTx]) run(ctx context.Context, consumer, id string, fn func(ctx context.Context) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Value: r, Stack: debug.Stack()}
			c.logger.ErrorContext(ctx, "inbox: handler panicked", "consumer", consumer, "id", id, "panic", r)
		}
	}()
	return fn(WithConsumer(ctx, consumer))
}

// ProcessTx claims msg.ID for consumer inside tx, a transaction the caller
// began, as Process does inside its own. It returns Applied when the claim
// is new: do the work in tx, commit, then ack. It returns Duplicate when
// consumer had already applied msg.ID: do not do the work; roll back (or
// carry on with unrelated work) and ack.
//
// Make the claim the first statement of tx, so that a duplicate has changed
// nothing when it finds the row. ProcessTx does not retry conflicts: the
// transaction is the caller's to run again.
func (c *Client[TTx]) ProcessTx(ctx context.Context, tx TTx, consumer string, msg Message) (Outcome, error) {
	id, err := c.check(consumer, msg.ID)
	if err != nil {
		return 0, err
	}
	claimed, err := c.driver.Claim(ctx, tx, c.claimParams(consumer, id))
	if err != nil {
		return 0, claimFailure(StageClaim, fmt.Errorf("inbox: claim %s/%s: %w", consumer, id, c.classify(err)))
	}
	if !claimed {
		return Duplicate, nil
	}
	return Applied, nil
}

// check validates consumer and returns id canonicalised.
func (c *Client[TTx]) check(consumer, id string) (string, error) {
	if err := ValidateConsumer(consumer); err != nil {
		return "", err
	}
	canon, err := c.canonicalID(id)
	if err != nil {
		return "", fmt.Errorf("inbox: consumer %s: %w", consumer, err)
	}
	return canon, nil
}

func (c *Client[TTx]) claimParams(consumer, id string) *inboxdriver.ClaimParams {
	return &inboxdriver.ClaimParams{
		Consumer:    consumer,
		ID:          id,
		LockTimeout: c.config.LockTimeout,
	}
}

// Key runs key on msg and canonicalises the id it returns, so that a
// transport adapter can tell a message with no usable id before processing.
// Its errors are tagged StageKey, and are the message's: a KeyFunc's error
// that says neither ErrNoMessageID nor ErrMalformedID, and is not
// Permanent, is wrapped with ErrMalformedID, so that every adapter
// dead-letters it with ReasonMalformedID. Only a KeyFunc error marked
// Unavailable (or wrapping ErrUnavailable) is not the message's.
func (c *Client[TTx]) Key(key KeyFunc, msg Message) (string, error) {
	if key == nil {
		return "", errors.New("inbox: no KeyFunc configured")
	}
	id, err := key(msg)
	if err == nil {
		id, err = c.canonicalID(id)
	}
	if err != nil {
		if !IsPermanent(err) && !errors.Is(err, ErrUnavailable) {
			err = fmt.Errorf("%w: %w", ErrMalformedID, err)
		}
		return "", atStage(StageKey, err)
	}
	return id, nil
}
