package inboxdriver

import (
	"context"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/txinbox/inbox/inboxtype"
)

// Layout is the physical layout of the inbox table, chosen when it is
// migrated.
type Layout string

const (
	// LayoutPlain is one table. It is the default.
	LayoutPlain Layout = "plain"
	// LayoutPartitioned is, on Postgres only, a table partitioned by range
	// over message_id, one partition per UTC day of the ids' time. The ids
	// must be time-ordered (UUIDv7, or ULIDs stored as UUIDs), so that an
	// id names its day: retention drops a whole day at once, and an id
	// outside every partition (older than retention, far in the future, or
	// not time-ordered) cannot be claimed at all. There is no DEFAULT
	// partition, by design: it would take those ids in, and it would
	// forbid DETACH PARTITION … CONCURRENTLY.
	LayoutPartitioned Layout = "partitioned"
)

// PartitionSuffixLen is the length of the suffix that names a partition
// after its day: "_p20250102".
const PartitionSuffixLen = len("_p20060102")

// validateLayout checks t's layout for dialect d.
func (t Tables) validateLayout(d Dialect) error {
	switch t.Layout {
	case LayoutPlain:
		return nil
	case LayoutPartitioned:
	default:
		return fmt.Errorf("inbox: Tables.Layout %q: want %q or %q", t.Layout, LayoutPlain, LayoutPartitioned)
	}
	switch {
	case d != DialectPostgres:
		return fmt.Errorf("inbox: Tables.Layout %q is for Postgres only, not %s", t.Layout, d)
	case t.IDType != IDTypeUUID:
		return fmt.Errorf("inbox: Tables.Layout %q needs Tables.IDType %q: partitions are ranges of UUIDs", t.Layout, IDTypeUUID)
	case len(t.Inbox)+PartitionSuffixLen > MaxIdentLen:
		return fmt.Errorf("inbox: Tables.Inbox %q is too long for Tables.Layout %q: its partitions are named %q, longer than %d bytes",
			t.Inbox, t.Layout, t.Inbox+"_p20060102", MaxIdentLen)
	}
	return nil
}

// Partitioner is implemented by a store that can keep the inbox in the
// partitioned layout (LayoutPartitioned). The client finds it with a type
// assertion; its methods fail on a store whose table is not partitioned.
type Partitioner interface {
	// PartitionConfig returns the store's partition settings, with
	// defaults applied.
	PartitionConfig() PartitionConfig

	// Partitions lists the inbox's partitions, oldest first, with the
	// tables that maintenance left detached.
	Partitions(ctx context.Context) (*inboxtype.PartitionState, error)

	// PartitionMaintain makes the partitions that are missing ahead and
	// drops the expired ones, as p says. One maintainer runs at a time,
	// under a store-wide lock: when another holds it, nothing is done and
	// the report says Skipped. Claims are never blocked: partitions are
	// made with CREATE TABLE then ATTACH PARTITION, and dropped with DETACH
	// PARTITION … CONCURRENTLY then DROP TABLE. A detach that an earlier
	// run left pending is finished first.
	PartitionMaintain(ctx context.Context, p *inboxtype.PartitionMaintainParams) (*inboxtype.PartitionMaintainReport, error)
}

// Defaults of PartitionConfig.
const (
	DefaultPartitionPremake  = 7 * 24 * time.Hour
	DefaultPartitionMaxSkew  = 24 * time.Hour
	DefaultPartitionBackfill = 30 * 24 * time.Hour
)

// PartitionConfig are the settings of a partitioned inbox, given to its
// store.
type PartitionConfig struct {
	// Premake is how far ahead of the database's clock maintenance makes
	// partitions. It covers producers whose clocks run ahead, and
	// maintenance that stops for a while: an id beyond the partitions
	// made is refused. It must be at least MaxSkew. Defaults to
	// DefaultPartitionPremake (7 days).
	Premake time.Duration

	// MaxSkew is how far a producer's clock may be from the database's.
	// An id beyond the partitions and further ahead than this is refused
	// as from the future (inbox.ErrIDFuture), where a nearer one is a
	// partition that maintenance has not made yet, which is retried. The
	// client refuses a Retention shorter than its ReplayHorizon plus
	// MaxSkew: an event stamped by a clock that runs behind looks older
	// than it is. Defaults to DefaultPartitionMaxSkew (24h).
	MaxSkew time.Duration

	// Backfill is how far back of the database's clock the first
	// partitions of an inbox that has none reach, so that events older
	// than the migration still apply. Maintenance never makes a partition
	// older than the oldest one: a day dropped stays dropped. Defaults to
	// DefaultPartitionBackfill (30 days).
	Backfill time.Duration
}

// WithDefaults returns c with zero fields set to their defaults.
func (c PartitionConfig) WithDefaults() PartitionConfig {
	if c.Premake == 0 {
		c.Premake = DefaultPartitionPremake
	}
	if c.MaxSkew == 0 {
		c.MaxSkew = DefaultPartitionMaxSkew
	}
	if c.Backfill == 0 {
		c.Backfill = DefaultPartitionBackfill
	}
	return c
}

// Validate checks c, with defaults applied.
func (c PartitionConfig) Validate() error {
	c = c.WithDefaults()
	switch {
	case c.MaxSkew < 0:
		return fmt.Errorf("inbox: PartitionConfig.MaxSkew must not be negative, got %v", c.MaxSkew)
	case c.Premake < c.MaxSkew:
		return fmt.Errorf("inbox: PartitionConfig.Premake (%v) is shorter than PartitionConfig.MaxSkew (%v): ids within the skew would find no partition", c.Premake, c.MaxSkew)
	case c.Premake > MaxPartitionsPerRun*24*time.Hour:
		return fmt.Errorf("inbox: PartitionConfig.Premake %v is longer than %d days", c.Premake, MaxPartitionsPerRun)
	case c.Backfill < 0 || c.Backfill > MaxPartitionsPerRun*24*time.Hour:
		return fmt.Errorf("inbox: PartitionConfig.Backfill must be between 0 and %d days, got %v", MaxPartitionsPerRun, c.Backfill)
	}
	return nil
}

// MaxPartitionsPerRun bounds the partitions one maintenance run makes.
const MaxPartitionsPerRun = 400

// PartitionMiss says why no partition covers an id.
type PartitionMiss string

// The reasons no partition covers an id.
const (
	// MissExpired is an id older than the oldest partition: a replay
	// beyond retention.
	MissExpired PartitionMiss = "expired"
	// MissFuture is an id beyond the newest partition and further ahead
	// of the database's clock than PartitionConfig.MaxSkew.
	MissFuture PartitionMiss = "future"
	// MissNotMade is an id of a time that maintenance has not made a
	// partition for (it has not run, or not for a while): retrying after
	// it runs applies it.
	MissNotMade PartitionMiss = "not_made"
)

// NoPartitionError is a claim that a partitioned inbox refused because no
// partition covers an id's time (Postgres SQLSTATE 23514, "no partition of
// relation … found for row"). Nothing was claimed.
type NoPartitionError struct {
	// ID is an id of the claim that no partition covers.
	ID string
	// Time is the time in ID.
	Time time.Time
	// Miss says why.
	Miss PartitionMiss
	// Oldest and Newest bound the partitions when the claim failed; zero
	// when there were none.
	Oldest, Newest time.Time
	// Err is the store's error.
	Err error
}

func (e *NoPartitionError) Error() string {
	rng := "the inbox has no partitions"
	if !e.Oldest.IsZero() {
		rng = fmt.Sprintf("the partitions cover %s to %s", e.Oldest.UTC().Format(time.RFC3339), e.Newest.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("no partition holds id %s of %s (%s): %s", e.ID, e.Time.UTC().Format(time.RFC3339Nano), rng, e.Miss)
}

// Unwrap returns the store's error.
func (e *NoPartitionError) Unwrap() error { return e.Err }

// ClassifyMiss says why no partition of state covers the id of time t, by
// the database's clock now.
func ClassifyMiss(state *inboxtype.PartitionState, t time.Time, maxSkew time.Duration) PartitionMiss {
	oldest, newest := state.Range()
	switch {
	case !oldest.IsZero() && t.Before(oldest):
		return MissExpired
	case t.After(state.Now.Add(maxSkew)) && (newest.IsZero() || !t.Before(newest)):
		return MissFuture
	default:
		return MissNotMade
	}
}

// IDTime returns the time in a canonical UUID whose first 48 bits are Unix
// milliseconds, as in a UUIDv7 or a ULID stored as a UUID. ok is false for
// a string that is not a canonical UUID.
func IDTime(id string) (t time.Time, ok bool) {
	if len(id) != 36 || id[8] != '-' {
		return time.Time{}, false
	}
	var b [6]byte
	if _, err := hex.Decode(b[:4], []byte(id[0:8])); err != nil {
		return time.Time{}, false
	}
	if _, err := hex.Decode(b[4:], []byte(id[9:13])); err != nil {
		return time.Time{}, false
	}
	var ms int64
	for _, c := range b {
		ms = ms<<8 | int64(c)
	}
	return time.UnixMilli(ms).UTC(), true
}

// TimeBound returns the smallest UUID of time t, truncated to the
// millisecond: the bound of a partition that starts at t.
func TimeBound(t time.Time) string {
	ms := uint64(t.UnixMilli()) & (1<<48 - 1)
	return fmt.Sprintf("%08x-%04x-0000-0000-000000000000", ms>>16, ms&0xffff)
}
