package inbox

import (
	"context"
	"fmt"

	"github.com/txinbox/inbox/inboxdriver"
)

// ReasonCrashedConsumer is the reason of a message that took its consumer
// down (an out-of-memory kill, a panic on a goroutine the handler started,
// os.Exit in a dependency) every time it ran: it was the first message after
// several takeovers in a row, and none of them got past it. Its handler was
// not run the last time. Replaying the dead letter runs it again,
// deliberately.
const ReasonCrashedConsumer = "crashed_consumer"

// Takeover is what the takeover ledger knew when a consumer took over a
// source.
type Takeover struct {
	// Count is how many takeovers in a row found the same message first
	// after an owner had started it (StartTakeover) and gone down before
	// getting past it, plus one: 1 for a message that never took an owner
	// down.
	Count int
	// Crashed reports that the owner before did not stop cleanly: it died
	// while it held the source, somewhere at or after the position it had
	// recorded.
	Crashed bool
}

// RecordTakeover records, in a short transaction of its own, that consumer
// took over source (a transport's unit of ordered delivery, such as
// "kafka:orders/3") and is about to process the message at position first.
// It is how a transport whose broker does not count deliveries bounds a
// message that crashes its consumer: a few writes per takeover, none per
// message. Call StartTakeover before running a message the ledger should
// count a crash against, and TakeoverDone when stopping cleanly.
//
// The errors of RecordTakeover, StartTakeover and TakeoverDone are the
// inbox's own work, tagged StageLedger: Judge classes each as FaultStore,
// never a message's fault.
func (c *Client[TTx]) RecordTakeover(ctx context.Context, consumer, source string, position int64) (Takeover, error) {
	if err := ValidateConsumer(consumer); err != nil {
		return Takeover{}, err
	}
	n, existed, err := c.driver.Takeover(ctx, &inboxdriver.TakeoverParams{Consumer: consumer, Source: source, Position: position})
	if err != nil {
		return Takeover{}, atStage(StageLedger, fmt.Errorf("inbox: record the takeover of %s by %s: %w", source, consumer, c.classify(err)))
	}
	return Takeover{Count: n, Crashed: existed}, nil
}

// StartTakeover records that consumer, which owns source, is about to run
// the message at position: if the process goes down from now on, the next
// takeover counts it against that message. A record at another position
// moves there, with a count of 1. A takeover that finds the record not
// started (the owner went down before running it, say because another
// source's message crashed the process) does not count.
func (c *Client[TTx]) StartTakeover(ctx context.Context, consumer, source string, position int64) error {
	if err := ValidateConsumer(consumer); err != nil {
		return err
	}
	if err := c.driver.TakeoverStart(ctx, &inboxdriver.TakeoverParams{Consumer: consumer, Source: source, Position: position}); err != nil {
		return atStage(StageLedger, fmt.Errorf("inbox: record the start of %s/%d by %s: %w", source, position, consumer, c.classify(err)))
	}
	return nil
}

// TakeoverDone clears the takeover record of source if it is still at
// position: consumer got past that message, or stops cleanly.
func (c *Client[TTx]) TakeoverDone(ctx context.Context, consumer, source string, position int64) error {
	if err := ValidateConsumer(consumer); err != nil {
		return err
	}
	if err := c.driver.TakeoverDone(ctx, &inboxdriver.TakeoverParams{Consumer: consumer, Source: source, Position: position}); err != nil {
		return atStage(StageLedger, fmt.Errorf("inbox: clear the takeover record of %s by %s: %w", source, consumer, c.classify(err)))
	}
	return nil
}
