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
	// Count is how many takeovers in a row, this one included, found the
	// same message first without any owner getting past it: 1 for a message
	// that no takeover found before.
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
// message that crashes its consumer: one write per takeover, none per
// message. Call TakeoverDone once past that message, or when stopping
// cleanly.
func (c *Client[TTx]) RecordTakeover(ctx context.Context, consumer, source string, position int64) (Takeover, error) {
	if err := ValidateConsumer(consumer); err != nil {
		return Takeover{}, err
	}
	n, existed, err := c.driver.Takeover(ctx, &inboxdriver.TakeoverParams{Consumer: consumer, Source: source, Position: position})
	if err != nil {
		return Takeover{}, fmt.Errorf("inbox: record the takeover of %s by %s: %w", source, consumer, c.classify(err))
	}
	return Takeover{Count: n, Crashed: existed}, nil
}

// MoveTakeover records that consumer, which took over source after a crash,
// is about to process the message at position: the record moves there,
// with a count of 1, so that a crash on that message is counted against it.
func (c *Client[TTx]) MoveTakeover(ctx context.Context, consumer, source string, position int64) error {
	if err := ValidateConsumer(consumer); err != nil {
		return err
	}
	if err := c.driver.TakeoverMove(ctx, &inboxdriver.TakeoverParams{Consumer: consumer, Source: source, Position: position}); err != nil {
		return fmt.Errorf("inbox: move the takeover record of %s by %s to %d: %w", source, consumer, position, c.classify(err))
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
		return fmt.Errorf("inbox: clear the takeover record of %s by %s: %w", source, consumer, c.classify(err))
	}
	return nil
}
