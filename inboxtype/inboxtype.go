// Package inboxtype holds the types that the inbox's client and its stores
// both hand to users: dead letters, statistics, effect-ledger entries and
// partitions, and the parameters of the operator's operations. It imports nothing of the project, so that the root package
// inbox and the store seam inboxdriver can both use it.
package inboxtype

import "time"

// Stats describe the inbox table.
type Stats struct {
	Consumers []ConsumerStats
	// TableBytes is the size of the inbox table with its indexes, or -1
	// where the store cannot tell.
	TableBytes int64
}

// OutboxStats describe a store's outbox (package outbox): the producer's
// events that relays have not published yet. Read them with
// inbox.Admin.OutboxStats.
type OutboxStats struct {
	// Pending counts the events not yet published, claimed by a relay or
	// not; Parked those parked for an operator; Published those kept after
	// publishing (outbox.RelayConfig.KeepPublished).
	Pending   int64
	Parked    int64
	Published int64
	// OldestPending is when the oldest pending event was enqueued, or zero.
	OldestPending time.Time
	// Lag is the age of the oldest pending event, by the clock of the
	// Admin that read them (inbox.Config.Now): how far the relays are
	// behind. Zero when nothing is pending. A store's driver leaves it
	// zero.
	Lag time.Duration
}

// ForgetCounts are the rows of one message that inbox.Admin.Forget
// deletes (inbox.Admin.ForgetCount counts them).
type ForgetCounts struct {
	// InboxRows counts its inbox row: 0 or 1.
	InboxRows int64
	// Effects counts its effect-ledger entries, one per step.
	Effects int64
}

// ConsumerStats describe one consumer's rows.
type ConsumerStats struct {
	Consumer string
	Rows     int64
	Oldest   time.Time
	Newest   time.Time
}

// DeadLetter is a message that will not be applied, as stored.
type DeadLetter struct {
	// ID is assigned by the store.
	ID       int64
	Consumer string
	// MessageID is the canonical id, or empty when the message had none or
	// a malformed one.
	MessageID string
	// DedupKey identifies the message among dead letters: its id when it
	// has one, its transport coordinates otherwise.
	DedupKey  string
	Transport string
	Queue     string
	Partition int32
	Offset    int64
	BrokerID  string
	Key       []byte
	Headers   map[string]string
	Payload   []byte
	Reason    string
	Error     string
	Attempts  int
	// FirstSeen and LastSeen are when the message was first and last
	// dead-lettered. On a write, LastSeen is the time of this write.
	FirstSeen time.Time
	LastSeen  time.Time
}

// EffectState is the state of a ledger entry.
type EffectState string

// The states of a ledger entry.
const (
	// EffectStarted is a step whose latest attempt was recorded before its
	// call and whose result was not recorded: the call may or may not have
	// taken effect at the provider.
	EffectStarted EffectState = "started"
	// EffectFailed is a step whose latest attempt certainly did not take
	// effect at the provider. It may be called again.
	EffectFailed EffectState = "failed"
	// EffectDone is a step whose call took effect and whose result is
	// stored. It is never called again.
	EffectDone EffectState = "done"
)

// EffectEntry is one entry of the effects ledger.
type EffectEntry struct {
	Consumer string
	// MessageID is the canonical id of the message.
	MessageID string
	// Step names the call within the message's handler, such as "capture".
	Step  string
	State EffectState
	// Result is what the call returned, once the entry is EffectDone.
	Result []byte
	// Attempts counts the attempts that were started.
	Attempts int
	// StartedAt is when the latest attempt was started.
	StartedAt time.Time
	// DoneAt is when the entry became EffectDone; zero before.
	DoneAt time.Time
}

// PartitionState is the partitions of an inbox.
type PartitionState struct {
	// Now is the database's clock when they were listed.
	Now time.Time
	// Partitions are the attached partitions, oldest first.
	Partitions []Partition
	// Detached are tables named as partitions that are not attached:
	// left by a run that stopped between a detach and its drop.
	Detached []Partition
	// Frozen is the plain table of an inbox adopted into this layout
	// (PartitionAdopt), while it is kept; nil when there is none.
	Frozen *FrozenInbox
}

// Covers reports whether an attached partition, not being detached, holds
// the time t.
func (s *PartitionState) Covers(t time.Time) bool {
	for _, p := range s.Partitions {
		if !p.DetachPending && !t.Before(p.From) && t.Before(p.To) {
			return true
		}
	}
	return false
}

// Range returns the lower bound of the oldest partition and the upper bound
// of the newest, of those attached and not being detached; zero times when
// there are none.
func (s *PartitionState) Range() (oldest, newest time.Time) {
	for _, p := range s.Partitions {
		if p.DetachPending {
			continue
		}
		if oldest.IsZero() || p.From.Before(oldest) {
			oldest = p.From
		}
		if p.To.After(newest) {
			newest = p.To
		}
	}
	return oldest, newest
}

// Partition is one partition of the inbox.
type Partition struct {
	// Name is the table's name, in the inbox's schema.
	Name string
	// From and To are the times of its bounds: it holds the ids of times
	// in [From, To).
	From, To time.Time
	// DetachPending is a DETACH PARTITION … CONCURRENTLY that did not
	// finish. It takes no new rows.
	DetachPending bool
	// Rows is the planner's estimate of its rows, -1 when never analysed.
	Rows int64
	// Bytes is its size, with its indexes.
	Bytes int64
}

// PartitionMaintainReport is what a maintenance run did, or with DryRun would do.
type PartitionMaintainReport struct {
	// Skipped is true when another maintainer held the lock: nothing was
	// done.
	Skipped bool
	// Now is the database's clock at the start of the run.
	Now time.Time
	// Created are the partitions made, oldest first.
	Created []Partition
	// Finalized are the detaches left pending by an earlier run that this
	// run finished.
	Finalized []Partition
	// Dropped are the partitions detached and dropped, oldest first,
	// with the tables an earlier run left detached.
	Dropped []Partition
	// Reattached are tables left detached whose time had not expired:
	// attached again.
	Reattached []Partition
	// Retired is the frozen plain table of an adopted inbox that the run
	// dropped (would drop, with DryRun): none of its ids could be claimed
	// again. Nil when none was.
	Retired *FrozenInbox
	// State is the partitions after the run (before it, with DryRun).
	State *PartitionState
}

// FrozenInbox is the plain table of an inbox adopted into the partitioned
// layout (PartitionAdopt), kept read-only beside it: a claim of an id it
// holds is a duplicate. Partition maintenance that drops retires it once
// none of its ids falls at or after the oldest partition's start: a replay
// of any of them is then refused as expired.
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

// PartitionAdoptReport is what PartitionAdopt did, or with DryRun would do.
type PartitionAdoptReport struct {
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
