package inboxdriver

import (
	"context"
	"time"
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
	// table to FrozenName and the new one to the inbox's name. From then
	// on every claim, by any client whatever its configuration, goes to
	// the partitioned table and finds an id the plain table holds already
	// claimed. Partition maintenance drops the frozen table, and the
	// trigger, once no id it holds could be claimed again (see
	// FrozenInbox). One maintainer runs at a time, as for
	// MaintainPartitions.
	AdoptPlainInbox(ctx context.Context, p *AdoptParams) (*AdoptReport, error)
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

// AdoptReport is what AdoptPlainInbox did, or with DryRun would do.
type AdoptReport struct {
	// Skipped is true when another maintainer held the lock: nothing was
	// done.
	Skipped bool
	// AlreadyAdopted is true when the inbox was partitioned already, with
	// its frozen plain table still beside it: nothing was done.
	AlreadyAdopted bool
	// Switched is true when this run renamed the tables.
	Switched bool
	// Frozen is the name the plain table has, or will have, frozen.
	Frozen string
	// Attempts are the attempts the switch took at its lock.
	Attempts int
	// Created are the partitions made for the new table.
	Created []Partition
	// State is the partitions after the run.
	State *PartitionState
}

// FrozenInbox is the plain table of an inbox adopted into the partitioned
// layout (AdoptPlainInbox), kept read-only beside it: a claim of an id it
// holds is a duplicate. Partition maintenance that drops (Drop) retires it
// once none of its ids falls at or after the oldest partition's start: a
// replay of any of them is then refused as expired.
type FrozenInbox struct {
	// Name is the table's name, in the inbox's schema.
	Name string
	// Rows is the planner's estimate of its rows, -1 when never analysed.
	Rows int64
	// Bytes is its size, with its indexes.
	Bytes int64
	// Consulted is true while claims look ids up in it (its trigger is on
	// the inbox).
	Consulted bool
}

// FrozenName is the name of the frozen plain table of inbox.
func FrozenName(inbox string) string { return IndexName(inbox, "frozen") }

// AdoptingName is the name of the partitioned table that an adoption
// makes beside the plain inbox, before the switch.
func AdoptingName(inbox string) string { return IndexName(inbox, "adopting") }

// FrozenCheckName is the name of the trigger, and of its function, that
// looks a new row of the inbox up in its frozen table.
func FrozenCheckName(inbox string) string { return IndexName(inbox, "frozen_check") }
