package inboxdriver

import (
	"context"
	"time"

	"github.com/txinbox/inbox/inboxtype"
)

// Adopter is implemented by a store that can move a plain inbox to the
// partitioned layout while consumers run (the Postgres stores). The client
// finds it with a type assertion.
type Adopter interface {
	// AdoptPlainInbox moves the store's inbox, a plain table, to the
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
	// MaintainPartitions.
	AdoptPlainInbox(ctx context.Context, p *AdoptParams) (*inboxtype.AdoptReport, error)
}

// Defaults of AdoptParams.
const (
	DefaultAdoptLockTimeout = time.Second
	DefaultAdoptAttempts    = 30
)

// AdoptParams say how AdoptPlainInbox switches.
type AdoptParams struct {
	// LockTimeout bounds each attempt's wait for the lock of the switch,
	// which must wait for the claims open on the plain table; claims that
	// arrive meanwhile wait behind it, so this is the longest a claim
	// stalls. Defaults to DefaultAdoptLockTimeout (1s).
	LockTimeout time.Duration
	// Attempts bounds the attempts at the switch, a second apart.
	// Defaults to DefaultAdoptAttempts (30).
	Attempts int
	// Backfill is how far back of the database's clock the new table's
	// partitions reach, when longer than PartitionConfig.Backfill: an id
	// of the frozen table older than the oldest partition is refused as
	// expired, where inside the partitions it is a duplicate.
	Backfill time.Duration
	// DryRun says what would be done, and does nothing.
	DryRun bool
}

// WithDefaults returns p with zero fields set to their defaults.
func (p AdoptParams) WithDefaults() AdoptParams {
	if p.LockTimeout <= 0 {
		p.LockTimeout = DefaultAdoptLockTimeout
	}
	if p.Attempts <= 0 {
		p.Attempts = DefaultAdoptAttempts
	}
	return p
}
