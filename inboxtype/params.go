package inboxtype

import "time"

// The parameters of the operator's operations that inbox.Admin takes and
// passes on to the store's driver (inboxdriver). Each is declared once,
// here: the Admin applies the defaults that its comments name, and the
// store sees the fields filled.

// DeadLetterListParams filter a listing of dead letters
// (inbox.Admin.DeadLetterList).
type DeadLetterListParams struct {
	// Consumer keeps one consumer's dead letters, when not empty.
	Consumer string
	// Limit bounds the list. Defaults to 100.
	Limit int
}

// EffectListParams filter a listing of the effects ledger
// (inbox.Admin.EffectList). Zero fields do not filter.
type EffectListParams struct {
	Consumer string
	// MessageID lists the steps of one message. The Admin canonicalises
	// it before the store sees it.
	MessageID string
	State     EffectState
	// StartedBefore keeps the entries whose latest attempt started
	// strictly before it. With State EffectStarted, it finds stuck steps:
	// calls that started long ago and were never recorded done.
	StartedBefore time.Time
	// Limit bounds the list. Defaults to 100.
	Limit int
}

// PartitionMaintainParams say what a run of partition maintenance does
// (inbox.Admin.PartitionMaintain).
type PartitionMaintainParams struct {
	// Premake makes the partitions missing ahead, up to the store's
	// PartitionConfig.Premake.
	Premake bool
	// Drop drops the partitions whose every id is older than Retention,
	// counted from the ids' time on the database's clock.
	Drop bool
	// Retention defaults to inbox.Config.Retention. A retention shorter
	// than Config.ReplayHorizon plus the store's PartitionConfig.MaxSkew is
	// refused with inbox.ErrWindowTooShort. The store sees it positive
	// when Drop is set.
	Retention time.Duration
	// DryRun reports what the run would do, and does nothing.
	DryRun bool
}

// Defaults of PartitionAdoptParams.
const (
	DefaultAdoptLockTimeout = time.Second
	DefaultAdoptAttempts    = 30
)

// PartitionAdoptParams say how a plain inbox is moved to the partitioned
// layout (inbox.Admin.PartitionAdopt).
type PartitionAdoptParams struct {
	// LockTimeout bounds each attempt's wait for the switch's lock, which
	// waits for the claims open on the plain table while new claims wait
	// behind it: it is the longest a claim stalls. Defaults to
	// DefaultAdoptLockTimeout (1s).
	LockTimeout time.Duration
	// Attempts bounds the attempts at the switch, a second apart.
	// Defaults to DefaultAdoptAttempts (30).
	Attempts int
	// Backfill is how far back of the database's clock the new table's
	// partitions reach: a replay of an id the frozen table holds is a
	// duplicate when a partition covers the id's time, and is refused as
	// expired (never applied) when none does. Defaults to the longer of
	// the store's PartitionConfig.Backfill and inbox.Config.Retention plus
	// PartitionConfig.MaxSkew, so that the ids the plain inbox still
	// keeps stay duplicates; a store never reaches back less than its
	// PartitionConfig.Backfill.
	Backfill time.Duration
	// DryRun says what would be done, and does nothing.
	DryRun bool
}

// WithDefaults returns p with its zero LockTimeout and Attempts set to
// their defaults.
func (p PartitionAdoptParams) WithDefaults() PartitionAdoptParams {
	if p.LockTimeout <= 0 {
		p.LockTimeout = DefaultAdoptLockTimeout
	}
	if p.Attempts <= 0 {
		p.Attempts = DefaultAdoptAttempts
	}
	return p
}
