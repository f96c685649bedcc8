package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/txinbox/inbox/inboxdriver"
)

// ErrNoOutbox is returned by Admin.OutboxStats when the store keeps no
// outbox (it does not implement inboxdriver.OutboxAdmin).
var ErrNoOutbox = errors.New("the store keeps no outbox")

// OutboxStats describe a store's outbox (package outbox): the producer's
// events that relays have not published yet.
type OutboxStats struct {
	// Pending counts the events not yet published, claimed by a relay or
	// not; Parked those parked for an operator; Published those kept after
	// publishing (outbox.RelayConfig.KeepPublished).
	Pending   int64
	Parked    int64
	Published int64
	// OldestPending is when the oldest pending event was enqueued, or zero.
	OldestPending time.Time
	// Lag is the age of the oldest pending event: how far the relays are
	// behind. Zero when nothing is pending.
	Lag time.Duration
}

// OutboxStats reports the store's outbox, beside Stats: the pending and
// parked events and the lag, as of Config.Now. It counts every row: use it
// for operations and metrics, not on a hot path.
func (a *Admin) OutboxStats(ctx context.Context) (*OutboxStats, error) {
	oa, ok := a.driver.(inboxdriver.OutboxAdmin)
	if !ok {
		return nil, ErrNoOutbox
	}
	return ReadOutboxStats(ctx, oa, a.config.Now())
}

// ReadOutboxStats reads the outbox of the store behind a, as of now.
func ReadOutboxStats(ctx context.Context, a inboxdriver.OutboxAdmin, now time.Time) (*OutboxStats, error) {
	s, err := a.OutboxStats(ctx)
	if err != nil {
		err = fmt.Errorf("inbox: outbox stats: %w", err)
		if a.Classify(err) == inboxdriver.ClassUnavailable {
			err = fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		return nil, err
	}
	out := &OutboxStats{Pending: s.Pending, Parked: s.Parked, Published: s.Published, OldestPending: s.OldestPending}
	if !s.OldestPending.IsZero() {
		out.Lag = max(now.Sub(s.OldestPending), 0)
	}
	return out, nil
}
