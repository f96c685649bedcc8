package inbox

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"time"

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
//
// Process is ProcessBatch of one message.
func (c *Client[TTx]) Process(ctx context.Context, consumer string, msg Message, h Handler[TTx]) (Outcome, error) {
	id, err := c.admin.check(consumer, msg.ID)
	if err != nil {
		return 0, err
	}
	msg.ID = id
	var out [1]BatchResult
	c.runBatch(ctx, consumer, []Message{msg}, h, false, out[:])
	return out[0].Outcome, out[0].Err
}

// ClaimTx claims msg.ID for consumer inside tx, a transaction the caller
// began. It returns Applied when the claim is new: do the work in tx,
// commit, then ack. It returns Duplicate when consumer had already applied
// msg.ID: do not do the work; roll back (or carry on with unrelated work)
// and ack.
//
// Make the claim the first statement of tx, so that a duplicate has changed
// nothing when it finds the row. ClaimTx does not retry conflicts: the
// transaction is the caller's to run again.
func (c *Client[TTx]) ClaimTx(ctx context.Context, tx TTx, consumer string, msg Message) (Outcome, error) {
	id, err := c.admin.check(consumer, msg.ID)
	if err != nil {
		return 0, err
	}
	claimed, err := c.driver.Claim(ctx, tx, c.claimParams(consumer, []string{id}, false))
	if err != nil {
		return 0, c.claimFailure(consumer, []Message{{ID: id}}, err)
	}
	if !claimed[0] {
		return Duplicate, nil
	}
	return Applied, nil
}

// Key runs key on msg and returns msg with the canonical form of the id it
// returned as its ID, so that a transport adapter can tell a message with
// no usable id before processing it. This client does not canonicalise
// that ID again while it is unchanged. Key's errors are tagged StageKey, and
// are the message's: a KeyFunc's error that says neither ErrNoMessageID
// nor ErrMalformedID, and is not Permanent, is wrapped with ErrMalformedID,
// so that every adapter dead-letters it with ReasonMalformedID. Only a
// KeyFunc error marked Unavailable (or wrapping ErrUnavailable) is not the
// message's.
func (c *Client[TTx]) Key(key KeyFunc, msg Message) (Message, error) {
	if key == nil {
		return msg, errors.New("inbox: no KeyFunc configured")
	}
	id, err := key(msg)
	if err == nil {
		id, err = c.admin.canonicalID(id)
	}
	if err != nil {
		if !IsPermanent(err) && !errors.Is(err, ErrUnavailable) {
			err = fmt.Errorf("%w: %w", ErrMalformedID, err)
		}
		return msg, atStage(StageKey, err)
	}
	msg.ID, msg.keyed, msg.keyedBy = id, id, c.admin
	return msg, nil
}

// attempt is what one transaction over msgs did. When a handler failed,
// suspects are the messages it may have failed on: one, or the whole
// batch when a batch handler failed (or a claim refused one id of many),
// and the batch is split to find out.
type attempt struct {
	outcomes []Outcome
	err      error
	suspects []Message
}

// errClaimFirst is an attempt whose claim the store deferred (a Pipelined
// handler's) and that did not commit: a duplicate, or a handler that could
// not queue its work. It runs again with the claim first, so that a
// duplicate is found a Duplicate and a failure is charged to a new message
// only.
var errClaimFirst = errors.New("inbox: run again, claim first")

// transact runs msgs, whose ids are canonical and distinct, in one
// transaction, run again after conflicts (Config.MaxConflictRetries) and
// after a deferred claim that did not commit.
func (c *Client[TTx]) transact(ctx context.Context, consumer string, msgs []Message, h Handler[TTx]) attempt {
	_, pipelined := h.(inboxdriver.Pipelined)
	backoff := c.config.ConflictBackoff
	retried := false
	for retries := 0; ; {
		a := c.transactOnce(ctx, consumer, msgs, h, pipelined, retried)
		switch {
		case errors.Is(a.err, errClaimFirst):
			pipelined = false
			continue
		case a.err == nil || !errors.Is(a.err, ErrConflict) || retries >= c.config.MaxConflictRetries:
			return a
		}
		retries++
		retried = true
		wait := backoff/2 + rand.N(backoff/2+1)
		c.logger.DebugContext(ctx, "inbox: retrying after a conflict", "attempt", retries, "backoff", wait, "err", a.err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			a.err = errors.Join(a.err, ctx.Err())
			return a
		case <-t.C:
		}
		backoff = min(backoff*2, maxConflictBackoff)
	}
}

// transactOnce is one transaction over msgs: the claim, the handler for the
// new messages, the commit. retried says that an earlier attempt failed on
// a conflict: a duplicate found now was in flight then (Concurrent).
func (c *Client[TTx]) transactOnce(ctx context.Context, consumer string, msgs []Message, h Handler[TTx], pipelined, retried bool) (a attempt) {
	ctx, obs := c.observeTx(ctx, consumer, msgs)
	if obs != nil {
		defer func() {
			if errors.Is(a.err, errClaimFirst) {
				obs.end(ctx, nil, retried, nil) // nothing done: it runs again
				return
			}
			obs.end(ctx, a.outcomes, retried, a.err)
		}()
	}
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	tx, claimed, err := c.driver.BeginClaim(ctx, c.claimParams(consumer, ids, pipelined))
	obs.lap(phaseClaim)
	if err != nil {
		a.err = c.claimFailure(consumer, msgs, err)
		var npe *inboxdriver.NoPartitionError
		if len(msgs) > 1 && errors.As(err, &npe) {
			a.suspects = msgs // only the ids at fault should fail
		}
		return a
	}
	deferred := claimed == nil
	a.outcomes = make([]Outcome, len(msgs))
	fresh := msgs
	if !deferred {
		fresh = make([]Message, 0, len(msgs))
		for i, m := range msgs {
			if a.outcomes[i] = Duplicate; claimed[i] {
				a.outcomes[i] = Applied
				fresh = append(fresh, m)
			}
		}
		if len(fresh) == 0 {
			c.rollback(ctx, tx)
			return a
		}
	} else {
		for i := range a.outcomes {
			a.outcomes[i] = Applied
		}
	}
	fault.Inject(ctx, fault.AfterClaim)
	if bh, ok := h.(BatchHandler[TTx]); ok && len(msgs) > 1 {
		a.err = c.callTx(ctx, consumer, fresh[0].ID, tx, func(ctx context.Context) error { return bh.HandleBatch(ctx, tx, fresh) })
		a.suspects = msgs
	} else {
		for i, m := range fresh {
			if i > 0 {
				fault.Inject(ctx, fault.MidBatch)
			}
			if a.err = c.callTx(ctx, consumer, m.ID, tx, func(ctx context.Context) error { return h.Handle(ctx, tx, m) }); a.err != nil {
				a.suspects = fresh[i : i+1]
				break
			}
		}
	}
	obs.lap(phaseHandler)
	if a.err != nil {
		c.rollback(ctx, tx)
		if deferred {
			a.err = errClaimFirst
		} else {
			a.err = failure(StageHandler, consumer, a.suspects, a.err)
		}
		return a
	}
	a.suspects = nil
	fault.Inject(ctx, fault.AfterEffectBeforeCommit)
	err = c.driver.Commit(ctx, tx)
	obs.lap(phaseCommit)
	var workErr *inboxdriver.WorkError
	var npe *inboxdriver.NoPartitionError
	switch {
	case err == nil:
		return a
	case errors.Is(err, inboxdriver.ErrDuplicate) && len(msgs) == 1:
		a.outcomes[0] = Duplicate // the one id was claimed: nothing ran
	case errors.Is(err, inboxdriver.ErrDuplicate):
		a.err = errClaimFirst // which of the ids was claimed is not known
	case errors.As(err, &npe):
		// The deferred claim refused an id that no partition covers.
		a.err = c.claimFailure(consumer, msgs, err)
		if len(msgs) > 1 {
			a.suspects = msgs
		}
	case errors.As(err, &workErr):
		// The statements a Pipelined handler queued failed, on a sound
		// connection: the handler's failure, of any message of the batch.
		a.suspects = msgs
		a.err = failure(StageHandler, consumer, msgs, c.handlerErr(workErr.Err, false))
	default:
		c.rollback(ctx, tx)
		a.err = failure(StageCommit, consumer, msgs, c.admin.classify(err))
	}
	return a
}

// callTx runs a handler on tx with a context that names consumer (for
// Client.Effect), turning a panic into a PanicError, and asks the driver
// whether a failure left tx's connection broken: then the failure is the
// store's. A context that ended is the caller's (a shutdown, or the
// handler's own deadline), even though the driver may have closed the
// connection for it.
func (c *Client[TTx]) callTx(ctx context.Context, consumer, id string, tx TTx, fn func(ctx context.Context) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Value: r, Stack: debug.Stack()}
			c.logger.ErrorContext(ctx, "inbox: handler panicked", "consumer", consumer, "id", id, "panic", r)
		}
		if err != nil {
			ended := errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
			err = c.handlerErr(err, !ended && c.driver.TxBroken(ctx, tx, err))
		}
	}()
	return fn(WithConsumer(ctx, consumer))
}

// check validates consumer and returns id canonicalised.
func (a *Admin) check(consumer, id string) (string, error) {
	if err := ValidateConsumer(consumer); err != nil {
		return "", err
	}
	canon, err := a.canonicalID(id)
	if err != nil {
		return "", idFailure(consumer, err)
	}
	return canon, nil
}

func (c *Client[TTx]) claimParams(consumer string, ids []string, pipelined bool) *inboxdriver.ClaimParams {
	return &inboxdriver.ClaimParams{
		Consumer:    consumer,
		IDs:         ids,
		LockTimeout: c.config.LockTimeout,
		Pipelined:   pipelined,
	}
}

// failure words the failure of msgs at stage once, and tags it with the
// stage for Judge: "inbox: commit orders/0193…: store unavailable: …".
func failure(stage Stage, consumer string, msgs []Message, err error) error {
	f := &failureError{stage: stage, consumer: consumer, n: len(msgs), err: err}
	if len(msgs) > 0 {
		f.id = msgs[0].ID
	}
	return atStage(stage, f)
}

// claimFailure is failure at StageClaim, except when the message's id fell
// outside the partitions for its time (ErrIDExpired, ErrIDFuture): that
// failure is the message's, permanent, and the adapters dead-letter it (see
// Judge). An id whose partition is not made yet (ErrNoPartition) is the
// store's: the maintainer is behind.
func (c *Client[TTx]) claimFailure(consumer string, msgs []Message, err error) error {
	err = failure(StageClaim, consumer, msgs, c.admin.classify(err))
	if errors.Is(err, ErrIDExpired) || errors.Is(err, ErrIDFuture) {
		return errors.Unwrap(err) // the failureError, untagged
	}
	return err
}

// idFailure is the failure of a message whose id is missing or malformed.
func idFailure(consumer string, err error) error {
	return wrapf(err, "consumer %s", consumer)
}

// failureError is an error the client returns, worded once.
type failureError struct {
	stage    Stage
	consumer string
	id       string
	n        int
	err      error
}

func (e *failureError) unprefixed() string {
	where := e.consumer + "/" + e.id
	if e.n > 1 {
		where += fmt.Sprintf(" (batch of %d)", e.n)
	}
	return e.stage.String() + " " + where + ": " + causeText(e.err)
}

func (e *failureError) Error() string { return "inbox: " + e.unprefixed() }
func (e *failureError) Unwrap() error { return e.err }
