package inbox

import (
	"context"
	"fmt"

	"github.com/txinbox/inbox/inboxtype"
)

// Stats reports the inbox's size. It counts every row, so it reads the
// whole table: use it for operations, not on a hot path.
func (a *Admin) Stats(ctx context.Context) (*inboxtype.Stats, error) {
	s, err := a.driver.Stats(ctx)
	if err != nil {
		return nil, fmt.Errorf("inbox: stats: %w", a.classify(err))
	}
	return s, nil
}
