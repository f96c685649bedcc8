package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/txinbox/inbox/inboxdriver"
)

// Stats describe an outbox table.
type Stats struct {
	// Pending counts the events not yet published, claimed or not; Parked
	// those parked for an operator; Published those kept after publishing
	// (RelayConfig.KeepPublished).
	Pending   int64
	Parked    int64
	Published int64
	// OldestPending is when the oldest pending event was enqueued, or zero.
	OldestPending time.Time
	// Lag is the age of the oldest pending event: how far the relays are
	// behind. Zero when nothing is pending.
	Lag time.Duration
}

// ReadStats counts the rows of the outbox in store, as of now. It reads
// the whole table: use it for operations, not on a hot path.
func ReadStats(ctx context.Context, store inboxdriver.OutboxAdmin, now time.Time) (*Stats, error) {
	s, err := store.OutboxStats(ctx)
	if err != nil {
		return nil, fmt.Errorf("outbox: stats: %w", classify(store, err))
	}
	out := &Stats{Pending: s.Pending, Parked: s.Parked, Published: s.Published, OldestPending: s.OldestPending}
	if !s.OldestPending.IsZero() {
		out.Lag = max(now.Sub(s.OldestPending), 0)
	}
	return out, nil
}

// Stats counts the outbox's rows; see ReadStats.
func (o *Outbox[TTx]) Stats(ctx context.Context) (*Stats, error) {
	return ReadStats(ctx, o.store, o.config.Now())
}

// PurgePublished deletes the events published before before, which
// RelayConfig.KeepPublished kept, in batches of at most batch rows, and
// returns how many it deleted.
func PurgePublished(ctx context.Context, store inboxdriver.OutboxAdmin, before time.Time, batch int) (int64, error) {
	if batch <= 0 {
		return 0, fmt.Errorf("outbox: PurgePublished: batch must be positive, got %d", batch)
	}
	var total int64
	for {
		n, err := store.OutboxPurgePublished(ctx, &inboxdriver.OutboxPurgeParams{Before: before, Limit: batch})
		total += n
		if err != nil {
			return total, fmt.Errorf("outbox: purge published events: %w", classify(store, err))
		}
		if n < int64(batch) {
			return total, nil
		}
	}
}

// PurgePublished deletes the events published before before; see the
// function PurgePublished.
func (o *Outbox[TTx]) PurgePublished(ctx context.Context, before time.Time, batch int) (int64, error) {
	return PurgePublished(ctx, o.store, before, batch)
}
