package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxtype"
	"github.com/txinbox/inbox/internal/duration"
)

// The errors of an inbox in the partitioned layout
// (inboxdriver.LayoutPartitioned), whose partitions hold the days of the
// ids' time. A message that fails with ErrIDExpired, ErrIDFuture or
// ErrIDNotTimeOrdered is never applied, and its error is permanent:
// adapters dead-letter it at once and ack it, so that it is kept, never
// dropped and never applied twice.
var (
	// ErrIDExpired is returned when a message's id is older than the
	// inbox's oldest partition: its day was dropped, so whether it was
	// applied can no longer be told. It is a replay beyond retention.
	ErrIDExpired = errors.New("message id is older than the inbox's retention")

	// ErrIDFuture is returned when a message's id is beyond the inbox's
	// newest partition and further ahead of the database's clock than the
	// store's PartitionConfig.MaxSkew: a producer's clock is wrong.
	ErrIDFuture = errors.New("message id is from too far in the future")

	// ErrIDNotTimeOrdered is returned, before any SQL runs, when a
	// message's id does not carry its time: a UUID of a version other than
	// 7. (With IDFormatULID, a ULID carries its time and is stored as the
	// UUID of the same 128 bits.)
	ErrIDNotTimeOrdered = errors.New("message id is not time-ordered (want a UUIDv7 or a ULID)")

	// ErrNoPartition is returned when a message's id is of a time for which
	// partition maintenance has not made a partition yet: it has not run,
	// or not for a while (RunCleaner runs it, as does 'inbox partitions
	// premake'). It is retryable.
	ErrNoPartition = errors.New("no partition made yet for the message id's time")
)

// The dead-letter reasons of a partitioned inbox's refusals.
const (
	ReasonExpiredID      = "expired_id"
	ReasonFutureID       = "future_id"
	ReasonNotTimeOrdered = "not_time_ordered"
)

// partitionReason is the dead-letter reason of an id a partitioned inbox
// refused, or "".
func partitionReason(err error) string {
	switch {
	case errors.Is(err, ErrIDExpired):
		return ReasonExpiredID
	case errors.Is(err, ErrIDFuture):
		return ReasonFutureID
	case errors.Is(err, ErrIDNotTimeOrdered):
		return ReasonNotTimeOrdered
	}
	return ""
}

// partitioned reports whether the client's store keeps the inbox in the
// partitioned layout.
func (a *Admin) partitioned() bool {
	return a.driver.Tables().Layout == inboxdriver.LayoutPartitioned
}

// partitionConfig returns the store's partition settings.
func partitionConfig(d inboxdriver.Admin) inboxdriver.PartitionConfig {
	if p, ok := d.(inboxdriver.Partitioner); ok {
		return p.PartitionConfig()
	}
	return inboxdriver.PartitionConfig{}.WithDefaults()
}

// validatePartitions checks c for a store whose inbox is partitioned: the
// partitions count retention from the ids' time, which a producer's clock
// sets, so a retention must cover the replay horizon plus the clocks'
// skew.
func (c *Config) validatePartitions(d inboxdriver.Admin) error {
	if d.Tables().Layout != inboxdriver.LayoutPartitioned {
		return nil
	}
	return CheckPartitionRetention(c.Retention, c.ReplayHorizon, partitionConfig(d).MaxSkew)
}

// CheckPartitionRetention returns an error wrapping ErrWindowTooShort
// when dropping the partitions whose ids are older than retention could
// drop a day inside the replay horizon, given producers' clocks up to skew
// apart from the database's. Admin.PartitionMaintain checks it; a tool
// checks it with it before it reaches a store.
func CheckPartitionRetention(retention, horizon, skew time.Duration) error {
	if retention < horizon+skew {
		return wrapf(ErrWindowTooShort, "a retention of %s is shorter than the replay horizon %s plus the producers' clock skew %s (PartitionConfig.MaxSkew): the partitioned inbox counts retention from the event's time, and a replay inside the horizon would find its day dropped",
			duration.Format(retention), duration.Format(horizon), duration.Format(skew))
	}
	return nil
}

// canonicalID validates id for the client's IDFormat and returns the form
// the store holds. On a partitioned inbox it refuses an id that is not
// time-ordered, and a ULID becomes the UUID of its 128 bits.
func (a *Admin) canonicalID(id string) (string, error) {
	tables := a.driver.Tables()
	if a.config.IDFormat == IDFormatULID && tables.IDType == inboxdriver.IDTypeUUID {
		return ulidAsUUID(id)
	}
	canon, err := a.config.IDFormat.CanonicalID(id)
	if err != nil || tables.Layout != inboxdriver.LayoutPartitioned {
		return canon, err
	}
	if canon[14] != '7' {
		return "", Permanent(fmt.Errorf("%w: %s is a version %c UUID", ErrIDNotTimeOrdered, canon, canon[14]))
	}
	return canon, nil
}

// ulidAsUUID canonicalises a ULID, or the UUID it is stored as, to that
// UUID: a ULID's 128 bits start with its time in Unix milliseconds, as a
// UUIDv7's do.
func ulidAsUUID(id string) (string, error) {
	if id == "" {
		return "", ErrNoMessageID
	}
	if len(id) != 26 {
		if u, err := canonicalUUID(id); err == nil {
			return u, nil // stored form, such as a dead letter's
		}
	}
	canon, err := canonicalULID(id)
	if err != nil {
		return "", err
	}
	var b [16]byte
	for i := 0; i < len(canon); i++ {
		carry := uint(indexCrockford(canon[i]))
		for j := 15; j >= 0; j-- {
			x := uint(b[j])<<5 | carry
			b[j] = byte(x)
			carry = x >> 8
		}
	}
	if b == ([16]byte{}) {
		return "", fmt.Errorf("%w: %q is the nil ULID", ErrMalformedID, clip(id))
	}
	const lowerHex = "0123456789abcdef"
	var s [36]byte
	n := 0
	for i, c := range b {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			s[n] = '-'
			n++
		}
		s[n], s[n+1] = lowerHex[c>>4], lowerHex[c&0xf]
		n += 2
	}
	return string(s[:]), nil
}

func indexCrockford(c byte) int {
	for i := 0; i < len(crockford); i++ {
		if crockford[i] == c {
			return i
		}
	}
	return 0 // canonicalULID checked every character
}

// partitionError maps a store's refusal of an id that no partition covers
// onto ErrIDExpired or ErrIDFuture, which are permanent, or ErrNoPartition,
// which is retryable; it returns nil for any other error, and for one
// mapped already.
func partitionError(err error) error {
	var npe *inboxdriver.NoPartitionError
	if !errors.As(err, &npe) || errors.Is(err, ErrIDExpired) || errors.Is(err, ErrIDFuture) || errors.Is(err, ErrNoPartition) {
		return nil
	}
	switch npe.Miss {
	case inboxdriver.MissExpired:
		return Permanent(marked(ErrIDExpired, err))
	case inboxdriver.MissFuture:
		return Permanent(marked(ErrIDFuture, err))
	default:
		return marked(ErrNoPartition, err)
	}
}

// PartitionMaintain keeps the partitions of a partitioned inbox: it makes
// those missing ahead and drops the expired ones, as p says, without
// blocking claims. One maintainer runs at a time: when another holds the
// store's lock, it does nothing and the report says Skipped. RunCleaner
// calls it on a partitioned inbox; call it yourself to run maintenance on
// a schedule of your own. On an inbox not partitioned it fails.
func (a *Admin) PartitionMaintain(ctx context.Context, p inboxtype.PartitionMaintainParams) (*inboxtype.PartitionMaintainReport, error) {
	pt, ok := a.driver.(inboxdriver.Partitioner)
	if !ok || !a.partitioned() {
		return nil, fmt.Errorf("inbox: partitions: the store's inbox is not in the partitioned layout (Tables.Layout %q)", inboxdriver.LayoutPartitioned)
	}
	if p.Retention == 0 {
		p.Retention = a.config.Retention
	}
	if p.Drop {
		if err := CheckPartitionRetention(p.Retention, a.config.ReplayHorizon, pt.PartitionConfig().MaxSkew); err != nil {
			return nil, err
		}
	}
	rep, err := pt.PartitionMaintain(ctx, &p)
	if err != nil {
		return rep, fmt.Errorf("inbox: partitions: %w", a.classify(err))
	}
	return rep, nil
}

// Partitions lists the partitions of a partitioned inbox, oldest first.
func (a *Admin) Partitions(ctx context.Context) (*inboxtype.PartitionState, error) {
	pt, ok := a.driver.(inboxdriver.Partitioner)
	if !ok || !a.partitioned() {
		return nil, fmt.Errorf("inbox: partitions: the store's inbox is not in the partitioned layout (Tables.Layout %q)", inboxdriver.LayoutPartitioned)
	}
	st, err := pt.Partitions(ctx)
	if err != nil {
		return nil, fmt.Errorf("inbox: partitions: %w", a.classify(err))
	}
	return st, nil
}

// cleanPartitions is RunCleaner's turn on a partitioned inbox: make the
// partitions ahead, drop those past Config.Retention.
func (a *Admin) cleanPartitions(ctx context.Context) error {
	rep, err := a.PartitionMaintain(ctx, inboxtype.PartitionMaintainParams{Premake: true, Drop: true})
	if err != nil {
		return err
	}
	if len(rep.Created)+len(rep.Dropped)+len(rep.Finalized)+len(rep.Reattached) > 0 {
		a.logger.InfoContext(ctx, "inbox: cleaner maintained the partitions",
			"created", len(rep.Created), "dropped", len(rep.Dropped), "finalized", len(rep.Finalized), "reattached", len(rep.Reattached))
	}
	return nil
}
