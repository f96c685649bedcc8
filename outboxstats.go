package inbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxtype"
)

// ErrNoOutbox is returned by Admin.OutboxStats when the store keeps no
// outbox (it does not implement inboxdriver.OutboxAdmin).
var ErrNoOutbox = errors.New("the store keeps no outbox")

// OutboxStats reports the store's outbox, beside Stats: the pending and
// parked events and the lag, as of Config.Now. It counts every row: use it
// for operations and metrics, not on a hot path.
func (a *Admin) OutboxStats(ctx context.Context) (*inboxtype.OutboxStats, error) {
	oa, ok := a.driver.(inboxdriver.OutboxAdmin)
	if !ok {
		return nil, ErrNoOutbox
	}
	s, err := oa.OutboxStats(ctx)
	if err != nil {
		return nil, fmt.Errorf("inbox: outbox stats: %w", a.classify(err))
	}
	s.Lag = 0
	if !s.OldestPending.IsZero() {
		s.Lag = max(a.config.Now().Sub(s.OldestPending), 0)
	}
	return s, nil
}
