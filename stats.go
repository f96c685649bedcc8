package inbox

import (
	"context"
	"fmt"

	"github.com/txinbox/inbox/inboxdriver"
)

// Stats describe the inbox table: rows per consumer, their oldest and newest
// processed_at, and the table's size.
type Stats = inboxdriver.Stats

// ConsumerStats describe one consumer's rows.
type ConsumerStats = inboxdriver.ConsumerStats

// Stats reports the inbox's size. It counts every row, so it reads the
// whole table: use it for operations, not on a hot path.
func (c *Client[TTx]) Stats(ctx context.Context) (*Stats, error) {
	s, err := c.driver.Stats(ctx)
	if err != nil {
		return nil, fmt.Errorf("inbox: stats: %w", c.classify(err))
	}
	return s, nil
}
