package inboxdriver

import (
	"context"

	"github.com/txinbox/inbox/inboxtype"
)

// Adopter is implemented by a store that can move a plain inbox to the
// partitioned layout while consumers run (the Postgres stores). The client
// finds it with a type assertion.
type Adopter interface {
	// PartitionAdopt moves the store's inbox, a plain table, to the
	// partitioned layout without a window in which a duplicate could
	// apply. It makes a partitioned table beside the plain one, with its
	// partitions, and a trigger on it that looks each new row up in the
	// plain table; then, in one short transaction, it renames the plain
	// table to "<inbox>_frozen" and the new one to the inbox's name. From then
	// on every claim, by any client whatever its configuration, goes to
	// the partitioned table and finds an id the plain table holds already
	// claimed. Partition maintenance drops the frozen table, and the
	// trigger, once no id it holds could be claimed again (see
	// inboxtype.FrozenInbox). One maintainer runs at a time, as for
	// PartitionMaintain.
	PartitionAdopt(ctx context.Context, p *inboxtype.PartitionAdoptParams) (*inboxtype.PartitionAdoptReport, error)
}
