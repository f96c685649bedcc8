package inbox

import (
	"context"
	"fmt"

	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxtype"
)

// PartitionAdopt moves an inbox that was migrated with the plain layout to
// the partitioned layout (Postgres), while consumers keep running, and
// without a window in which a duplicate could apply.
//
// The client's store must be configured with Tables.Layout
// inboxdriver.LayoutPartitioned (the layout the inbox is moving to) while
// its table is still the plain one. The new partitioned table is made beside
// the plain one; one short transaction then renames the plain table to
// "<inbox>_frozen" and the new one to the inbox's name. From then on
// every claim, from any client, goes to the partitioned table, and an id
// that the frozen table holds is a duplicate there: it is looked up
// read-only. The switch waits for the claims open on the plain table, each
// attempt at most p.LockTimeout, and claims that arrive meanwhile wait
// behind it.
//
// Partition maintenance that drops (RunCleaner, PartitionMaintain with
// Drop) retires the frozen table once none of its ids falls inside the
// partitions: any replay of them is then refused as expired.
//
// Deploy every consumer with the partitioned layout before the switch. A
// process still configured with the plain layout claims correctly after it,
// but its cleaner's purge would run the plain table's statement on the
// partitioned one.
func (a *Admin) PartitionAdopt(ctx context.Context, p inboxtype.PartitionAdoptParams) (*inboxtype.PartitionAdoptReport, error) {
	ad, ok := a.driver.(inboxdriver.Adopter)
	if !ok || !a.partitioned() {
		return nil, fmt.Errorf("inbox: adopt: configure the store with Tables.Layout %q, the layout the inbox moves to (a Postgres store)", inboxdriver.LayoutPartitioned)
	}
	if p.Backfill == 0 {
		pc := partitionConfig(a.driver)
		p.Backfill = max(pc.Backfill, a.config.Retention+pc.MaxSkew)
	}
	rep, err := ad.PartitionAdopt(ctx, &p)
	if err != nil {
		return rep, a.classify(err) // the store's errors say "inbox: adopt: …
	}
	return rep, nil
}
