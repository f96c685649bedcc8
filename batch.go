package inbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/internal/fault"
)

// ErrNotAttempted is the result of the messages that ProcessBatchOrdered did
// not attempt because an earlier message of the batch failed with a
// retryable error. It is retryable: deliver them again after the earlier
// one.
var ErrNotAttempted = errors.New("inbox: not attempted: an earlier message of the batch failed")

// BatchResult is the result of one message of a batch: an Outcome, or an
// error that means the message was not applied.
type BatchResult struct {
	Outcome Outcome
	Err     error
}

// ProcessBatch applies many messages for consumer, each exactly once, in
// one transaction:
//
//  1. one statement claims every id (unnest on Postgres);
//  2. the handler runs for the new ids only, in message order;
//  3. one commit.
//
// The result has one entry per message, in the order of msgs. A message
// whose id was already applied, earlier or by an earlier message of the same
// batch, is a Duplicate. A message with no id or a malformed one fails with
// ErrNoMessageID or ErrMalformedID and does not hold up the others.
//
// When the handler fails on one message, the transaction is rolled back and
// the batch is split: the messages before it run again as a batch, the
// failing message runs alone and reports its error, and the messages after
// it run as a batch, split again if another fails. A poison message never
// fails its batch-mates. Use ProcessBatchOrdered when later messages must
// wait for a failed one.
//
// ProcessBatch returns an error, and no results, only when consumer is
// invalid.
func (c *Client[TTx]) ProcessBatch(ctx context.Context, consumer string, msgs []Message, h Handler[TTx]) ([]BatchResult, error) {
	return c.processBatch(ctx, consumer, msgs, h, false)
}

// ProcessBatchOrdered is ProcessBatch for a stream whose order matters, such
// as a Kafka partition. After the first message that fails with a retryable
// error, the later messages are not attempted and report ErrNotAttempted, so
// that none is applied before the failed one. Messages that fail
// permanently (no id, a malformed id, a Permanent handler error) do not stop
// the batch: they are for the dead-letter store.
func (c *Client[TTx]) ProcessBatchOrdered(ctx context.Context, consumer string, msgs []Message, h Handler[TTx]) ([]BatchResult, error) {
	return c.processBatch(ctx, consumer, msgs, h, true)
}

func (c *Client[TTx]) processBatch(ctx context.Context, consumer string, msgs []Message, h Handler[TTx], ordered bool) ([]BatchResult, error) {
	if err := ValidateConsumer(consumer); err != nil {
		return nil, err
	}
	results := make([]BatchResult, len(msgs))
	// Canonicalise ids and keep the first message of each id. A later
	// message with the same id takes the first one's result.
	first := make(map[string]int, len(msgs))
	firstOf := make([]int, len(msgs))
	unique := make([]Message, 0, len(msgs))
	uniqueAt := make([]int, 0, len(msgs))
	for i, m := range msgs {
		firstOf[i] = -1
		id, err := c.canonicalID(m.ID)
		if err != nil {
			results[i].Err = fmt.Errorf("inbox: consumer %s: %w", consumer, err)
			continue
		}
		if j, ok := first[id]; ok {
			firstOf[i] = j
			continue
		}
		first[id] = i
		m.ID = id
		unique = append(unique, m)
		uniqueAt = append(uniqueAt, i)
	}
	out := make([]BatchResult, len(unique))
	c.runBatch(ctx, consumer, unique, h, ordered, out)
	for k, i := range uniqueAt {
		results[i] = out[k]
	}
	for i, j := range firstOf {
		if j < 0 {
			continue
		}
		results[i] = results[j]
		if results[i].Err == nil {
			results[i].Outcome = Duplicate
		}
	}
	return results, nil
}

// batchHandlerError is a handler failure at msgs[index] of a batch attempt,
// or, with index -1, a BatchHandler's failure on the batch.
type batchHandlerError struct {
	index int
	err   error
}

func (e *batchHandlerError) Error() string { return e.err.Error() }
func (e *batchHandlerError) Unwrap() error { return e.err }

// runBatch processes msgs, whose ids are canonical and distinct, and writes
// their results to out.
func (c *Client[TTx]) runBatch(ctx context.Context, consumer string, msgs []Message, h Handler[TTx], ordered bool, out []BatchResult) {
	switch len(msgs) {
	case 0:
		return
	case 1:
		out[0].Outcome, out[0].Err = c.processOne(ctx, consumer, msgs[0], h)
		return
	}
	var outcomes []Outcome
	err := c.retryConflicts(ctx, func() error {
		var err error
		outcomes, err = c.batchOnce(ctx, consumer, msgs, h)
		return err
	})
	var he *batchHandlerError
	switch {
	case err == nil:
		for i := range out {
			out[i] = BatchResult{Outcome: outcomes[i]}
		}
	case errors.As(err, &he) && he.index < 0 && !errors.Is(err, ErrUnavailable):
		// A BatchHandler failed, and which message it failed on is not
		// known: run each half as a batch, splitting again where it fails,
		// down to single messages.
		mid := len(msgs) / 2
		c.logger.DebugContext(ctx, "inbox: splitting a failed batch in halves", "consumer", consumer, "messages", len(msgs), "err", err)
		c.runBatch(ctx, consumer, msgs[:mid], h, ordered, out[:mid])
		if ordered && anyRetryable(out[:mid]) {
			notAttempted(out[mid:])
			return
		}
		c.runBatch(ctx, consumer, msgs[mid:], h, ordered, out[mid:])
	case errors.As(err, &he) && !errors.Is(err, ErrUnavailable):
		// Isolate the failing message: the ones before it as a batch, it
		// alone, the ones after it as a batch.
		k := he.index
		c.logger.DebugContext(ctx, "inbox: splitting batch around a failed message", "consumer", consumer, "id", msgs[k].ID, "err", err)
		c.runBatch(ctx, consumer, msgs[:k], h, ordered, out[:k])
		if ordered && anyRetryable(out[:k]) {
			notAttempted(out[k:])
			return
		}
		out[k].Outcome, out[k].Err = c.processOne(ctx, consumer, msgs[k], h)
		if ordered && IsRetryable(out[k].Err) {
			notAttempted(out[k+1:])
			return
		}
		c.runBatch(ctx, consumer, msgs[k+1:], h, ordered, out[k+1:])
	default:
		err = fmt.Errorf("inbox: process batch of %d for %s: %w", len(msgs), consumer, err)
		for i := range out {
			out[i] = BatchResult{Err: err}
		}
	}
}

// processOne is Process for a message whose id is canonical.
func (c *Client[TTx]) processOne(ctx context.Context, consumer string, msg Message, h Handler[TTx]) (Outcome, error) {
	var outcome Outcome
	err := c.retryConflicts(ctx, func() error {
		var err error
		outcome, err = c.processOnce(ctx, consumer, msg, h)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("inbox: process %s/%s: %w", consumer, msg.ID, err)
	}
	return outcome, nil
}

// batchOnce runs one transaction over msgs. A handler failure is returned
// as a *batchHandlerError.
func (c *Client[TTx]) batchOnce(ctx context.Context, consumer string, msgs []Message, h Handler[TTx]) (outcomes []Outcome, err error) {
	ctx, obs := c.observeTx(ctx, consumer, msgs)
	if obs != nil {
		defer func() { obs.end(ctx, outcomes, err) }()
	}
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	params := &inboxdriver.ClaimBatchParams{
		Consumer:    consumer,
		IDs:         ids,
		LockTimeout: c.config.LockTimeout,
	}
	ph, pipelinable := h.(PipelinedBatchHandler[TTx])
	pipelinable = pipelinable && c.pipeliner != nil
	if pipelinable && !c.afterDuplicate(consumer) {
		done, err := c.batchPipelined(ctx, obs, params, msgs, ph)
		if done || err != nil {
			if done {
				outcomes = make([]Outcome, len(msgs))
				for i := range outcomes {
					outcomes[i] = Applied
				}
			}
			return outcomes, err
		}
		// A duplicate in the batch: claim on its own, below.
	}
	tx, claimed, err := c.driver.BeginClaimBatch(ctx, params)
	obs.lap(phaseClaim)
	if err != nil {
		return nil, claimFailure(StageClaim, c.batchClaimError("claim", err))
	}
	outcomes = make([]Outcome, len(msgs))
	anyNew := false
	if bh, ok := h.(BatchHandler[TTx]); ok {
		fresh := make([]Message, 0, len(msgs))
		for i, m := range msgs {
			if !claimed[i] {
				outcomes[i] = Duplicate
				continue
			}
			outcomes[i] = Applied
			fresh = append(fresh, m)
		}
		if pipelinable && len(fresh) == len(msgs) {
			c.duplicates.Delete(consumer) // the run of duplicates has ended
		}
		if anyNew = len(fresh) > 0; anyNew {
			fault.Inject(ctx, fault.AfterClaim)
			err := c.callTx(ctx, consumer, fresh[0].ID, tx, func(ctx context.Context) error { return bh.HandleBatch(ctx, tx, fresh) })
			obs.lap(phaseHandler)
			if err != nil {
				c.rollback(ctx, tx)
				return nil, &batchHandlerError{index: -1, err: err}
			}
		}
	} else {
		for i, m := range msgs {
			if !claimed[i] {
				outcomes[i] = Duplicate
				continue
			}
			if anyNew {
				fault.Inject(ctx, fault.MidBatch)
			} else {
				fault.Inject(ctx, fault.AfterClaim)
			}
			anyNew = true
			err := c.handle(ctx, consumer, h, tx, m)
			obs.lap(phaseHandler)
			if err != nil {
				c.rollback(ctx, tx)
				return nil, &batchHandlerError{index: i, err: err}
			}
			outcomes[i] = Applied
		}
	}
	if !anyNew {
		c.rollback(ctx, tx)
		return outcomes, nil
	}
	fault.Inject(ctx, fault.AfterEffectBeforeCommit)
	err = c.driver.Commit(ctx, tx)
	obs.lap(phaseCommit)
	if err != nil {
		c.rollback(ctx, tx)
		return nil, atStage(StageCommit, fmt.Errorf("commit: %w", c.classify(err)))
	}
	return outcomes, nil
}

func anyRetryable(rs []BatchResult) bool {
	for _, r := range rs {
		if IsRetryable(r.Err) {
			return true
		}
	}
	return false
}

func notAttempted(rs []BatchResult) {
	for i := range rs {
		rs[i] = BatchResult{Err: ErrNotAttempted}
	}
}

// batchPipelined tries msgs as one round trip: BEGIN, a claim of every id,
// the work h describes for all of them, COMMIT. done reports that every
// message was applied. A duplicate in the batch stops it at the claim, with
// nothing applied: done and err are then zero, pipelining pauses for
// consumer (see afterDuplicate), and the caller claims on its own. A
// failure of the work is a *batchHandlerError for the whole batch.
func (c *Client[TTx]) batchPipelined(ctx context.Context, obs *txObservation, p *inboxdriver.ClaimBatchParams, msgs []Message, h PipelinedBatchHandler[TTx]) (done bool, err error) {
	var work any
	err = c.call(ctx, p.Consumer, msgs[0].ID, func(ctx context.Context) error {
		var err error
		work, err = h.PipelineBatch(ctx, msgs)
		return err
	})
	if err != nil {
		return false, &batchHandlerError{index: -1, err: err}
	}
	claimed, workErr, err := c.pipeliner.ProcessPipelinedBatch(ctx, p, work)
	obs.lap(phaseCommit)
	switch {
	case err != nil:
		return false, claimFailure(StageCommit, c.batchClaimError("pipelined transaction", err))
	case !claimed:
		c.duplicates.Store(p.Consumer, struct{}{})
		return false, nil
	case workErr != nil:
		return false, &batchHandlerError{index: -1, err: c.handlerErr(workErr, false)}
	}
	return true, nil
}
