package inboxnats

import (
	"context"
	"time"

	"github.com/txinbox/inbox/inboxtransport"
)

// leases holds the deliveries a consumer has fetched and not yet settled,
// and keeps them from being delivered again: a heartbeat sends each one
// InProgress, which restarts the server's AckWait for it.
type leases = inboxtransport.Held[*delivery]

func newLeases() *leases { return &leases{} }

// heartbeat sends InProgress for every held delivery each heartbeat
// interval, until ctx is done. A delivery is fetched at most one interval
// before its first InProgress, so an interval below AckWait keeps it.
func (c *Consumer[TTx]) heartbeat(ctx context.Context) {
	tick := time.NewTicker(max(c.beat, time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, d := range c.leases.All() {
			if ctx.Err() != nil {
				return
			}
			c.inProgress(ctx, d)
		}
	}
}

// inProgress restarts d's AckWait, unless d was settled meanwhile.
func (c *Consumer[TTx]) inProgress(ctx context.Context, d *delivery) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.settled {
		return
	}
	if err := d.raw.InProgress(); err != nil {
		// Disconnected: the message comes back when its AckWait runs out,
		// and the inbox skips it or waits for this delivery's claim.
		c.logger.WarnContext(ctx, "inboxnats: heartbeat failed: the message may be delivered again",
			"stream", c.config.Stream, "sequence", d.tr.Message.Source.Offset, "err", err)
	}
}
