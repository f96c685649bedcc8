package inbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxtype"
)

// ErrReplayUnsupported is returned by Admin.DeadLetterReplay and
// Client.ProcessReplays when the driver
// keeps no replay requests (it does not implement inboxdriver.ReplayStore).
var ErrReplayUnsupported = errors.New("the store keeps no replay requests")

// MaxReplayPerCall bounds the dead letters that one call of
// ProcessReplays replays. Call it again for the rest.
const MaxReplayPerCall = 1000

// replayPage is how many marked dead letters ProcessReplays reads at
// once.
const replayPage = 100

// ReplayResult is what ProcessReplays did with one dead letter.
type ReplayResult struct {
	// DeadLetter is the dead letter as it was before the replay.
	DeadLetter *inboxtype.DeadLetter
	// Outcome is Applied or Duplicate when Err is nil; the dead letter was
	// then deleted.
	Outcome Outcome
	// Err is why the message failed again: its handler's error. The dead
	// letter stays, with this error and one more attempt recorded, and it
	// is no longer marked: mark it again to retry.
	Err error
}

func (a *Admin) replayStore() (inboxdriver.ReplayStore, error) {
	rs, ok := a.driver.(inboxdriver.ReplayStore)
	if !ok {
		return nil, ErrReplayUnsupported
	}
	return rs, nil
}

// DeadLetterReplayParams choose the dead letters to replay: one by its
// ID, or every one of a Consumer.
type DeadLetterReplayParams struct {
	ID       int64
	Consumer string
	// DryRun marks nothing: DeadLetterReplay returns how many it would
	// mark, so that a tool says it before it marks them.
	DryRun bool
}

// DeadLetterReplay asks for the replay of dead letters: it marks them, so
// that the application's next Client.ProcessReplays for their consumer
// replays them with the consumer's handler (only the application has it).
// It is what 'inbox deadletters replay' does, and returns how many it
// marked: a dead letter already marked, or with no valid id, is not
// counted; of two concurrent requests, one counts it. For one ID, it
// returns an error wrapping ErrNotFound when there is no such dead letter,
// and ErrNoMessageID when it has no valid id (no replay can apply it: fix
// the producer and publish it again). With p.DryRun it marks nothing, and
// returns, with the same errors, how many it would mark. The store's
// tables need migration 005.
func (a *Admin) DeadLetterReplay(ctx context.Context, p DeadLetterReplayParams) (int64, error) {
	switch {
	case p.ID != 0 && p.Consumer != "":
		return 0, errors.New("inbox: replay dead letters: give an ID or a Consumer, not both")
	case p.ID == 0:
		if err := ValidateConsumer(p.Consumer); err != nil {
			return 0, err
		}
	}
	rs, err := a.replayStore()
	if err != nil {
		return 0, err
	}
	n, err := rs.DeadLetterMarkReplay(ctx, &inboxdriver.DeadLetterMarkParams{ID: p.ID, Consumer: p.Consumer, Now: a.config.Now(), DryRun: p.DryRun})
	switch {
	case err != nil && p.ID != 0:
		return 0, fmt.Errorf("inbox: mark dead letter %d for replay: %w", p.ID, a.classify(err))
	case err != nil:
		return 0, fmt.Errorf("inbox: mark dead letters of %s for replay: %w", p.Consumer, a.classify(err))
	case n > 0 || p.ID == 0:
		return n, nil
	}
	// Nothing marked: say why.
	d, err := a.DeadLetterGet(ctx, p.ID)
	if err != nil {
		return 0, err
	}
	if d.MessageID == "" {
		return 0, fmt.Errorf("inbox: dead letter %d (reason %s) cannot be replayed: %w: fix the producer and publish it again", p.ID, d.Reason, ErrNoMessageID)
	}
	return 0, nil
}

// ProcessReplays replays, with h, the dead letters of consumer whose replay
// was asked for (Admin.DeadLetterReplay), oldest request first, at most
// MaxReplayPerCall of them.
// Call it where the consumer's handler lives, for instance on a ticker
// beside the consumer, so that an operator's 'inbox deadletters replay'
// takes effect.
//
// Each message is processed exactly as Process would: the inbox claims its
// id first, so a message is applied once however many replays race, and a
// replay of a message that was applied meanwhile is a Duplicate. A dead
// letter that is Applied or a Duplicate is deleted. One whose handler fails
// again stays, with the new error and one more attempt recorded, and is
// unmarked: one request, one attempt.
//
// A failure of the store, or of ctx, stops the call: it returns the results
// so far and the error, and the dead letters not replayed stay marked.
func (c *Client[TTx]) ProcessReplays(ctx context.Context, consumer string, h Handler[TTx]) ([]ReplayResult, error) {
	if err := ValidateConsumer(consumer); err != nil {
		return nil, err
	}
	rs, err := c.admin.replayStore()
	if err != nil {
		return nil, err
	}
	var results []ReplayResult
	for range MaxReplayPerCall / replayPage {
		page, err := rs.DeadLetterListMarked(ctx, &inboxtype.DeadLetterListParams{Consumer: consumer, Limit: replayPage})
		if err != nil {
			return results, fmt.Errorf("inbox: list dead letters of %s marked for replay: %w", consumer, c.admin.classify(err))
		}
		if len(page) == 0 {
			break
		}
		// Every dead letter of the page leaves the marked set: deleted,
		// unmarked, or the call returns.
		for _, d := range page {
			r, err := c.replayMarked(ctx, rs, d, h)
			if err != nil {
				return results, err
			}
			results = append(results, r)
		}
	}
	return results, nil
}

// replayMarked replays one marked dead letter.
func (c *Client[TTx]) replayMarked(ctx context.Context, rs inboxdriver.ReplayStore, d *inboxtype.DeadLetter, h Handler[TTx]) (ReplayResult, error) {
	msg := deadLetterMessage(d)
	outcome, err := c.Process(ctx, d.Consumer, msg, h)
	if err == nil {
		// Deleting it deletes its mark. If this fails, it stays marked, and
		// the next call finds it a Duplicate.
		if _, err := c.driver.DeadLetterDelete(ctx, d.ID); err != nil {
			return ReplayResult{}, fmt.Errorf("inbox: replayed dead letter %d (%v) but could not delete it: %w", d.ID, outcome, c.admin.classify(err))
		}
		return ReplayResult{DeadLetter: d, Outcome: outcome}, nil
	}
	if storeFailure(err) {
		return ReplayResult{}, wrapf(err, "replay dead letter %d", d.ID)
	}
	if derr := c.DeadLetter(ctx, DeadLetterParams{Consumer: d.Consumer, Message: msg, Err: err, Attempts: d.Attempts + 1}); derr != nil {
		return ReplayResult{}, derr
	}
	if _, uerr := rs.DeadLetterUnmarkReplay(ctx, d.ID); uerr != nil {
		return ReplayResult{}, fmt.Errorf("inbox: unmark dead letter %d after its replay failed: %w", d.ID, c.admin.classify(uerr))
	}
	return ReplayResult{DeadLetter: d, Err: err}, nil
}

// storeFailure reports whether err is a failure of the store or of the
// context, rather than of the message: whatever Judge finds is not the
// message's (the store's, whatever its code, a dependency the handler
// marked Unavailable, a lock held by a concurrent delivery), a conflict
// that outlasted its retries, or the end of ctx.
func storeFailure(err error) bool {
	switch Judge(err) {
	case FaultStore, FaultSystemic, FaultContention:
		return true
	}
	return errors.Is(err, ErrConflict) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// deadLetterMessage is the message a dead letter stored.
func deadLetterMessage(d *inboxtype.DeadLetter) Message {
	return Message{
		ID:      d.MessageID,
		Payload: d.Payload,
		Headers: d.Headers,
		Source: Source{
			Transport: d.Transport, Queue: d.Queue, Partition: d.Partition,
			Offset: d.Offset, BrokerID: d.BrokerID, Key: d.Key,
		},
	}
}
