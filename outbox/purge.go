package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/txinbox/inbox/inboxdriver"
)

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
