package inboxdriver

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/txinbox/inbox/inboxtype"
)

// OutboxStore is what a store provides to package outbox: the writes of
// the producer's events in the business transaction, and the relay's
// claims and write-backs. It is optional: a Driver that keeps an outbox
// also implements it, over the table that migration 6 creates
// (Tables.Outbox and Tables.OutboxKeys).
type OutboxStore[TTx any] interface {
	OutboxAdmin

	// OutboxBegin begins a transaction for an enqueue that the caller
	// does not run inside a transaction of its own. It is committed and
	// rolled back with Commit and Rollback.
	OutboxBegin(ctx context.Context) (TTx, error)

	// Commit commits tx.
	Commit(ctx context.Context, tx TTx) error

	// Rollback rolls tx back. Rolling back a closed transaction is not an
	// error.
	Rollback(ctx context.Context, tx TTx) error

	// OutboxEnqueue writes p.Rows into the outbox inside tx, in one
	// statement where the dialect allows it. Each row's ID, Topic, Key,
	// Headers, Payload, CausationID and CreatedAt are set; the row is
	// available from CreatedAt. With p.Ordered, every row with a key gets
	// the next sequence number of its key, in the order of p.Rows, from
	// Tables.OutboxKeys, whose row lock serialises the producers of one key
	// in commit order; rows without a key are unordered.
	OutboxEnqueue(ctx context.Context, tx TTx, p *OutboxEnqueueParams) error
}

// OutboxQueuer is implemented by a store whose enqueue can be queued among
// the caller's own statements, to reach the server with them in one round
// trip (outbox.Outbox.EnqueueBatch). inboxpgx queues on a *pgx.Batch.
type OutboxQueuer interface {
	// OutboxQueue queues on batch the statement that OutboxEnqueue would
	// run. It returns an error, and queues nothing, when batch is not the
	// store's batch type.
	OutboxQueue(batch any, p *OutboxEnqueueParams) error
}

// OutboxAckClaimer is implemented by a store that can send a relay's
// write-back of one batch with its claim of the next, in one round trip
// (package outbox's relay uses it while the outbox is not drained).
type OutboxAckClaimer interface {
	// OutboxAckClaim does OutboxAck(a) and then OutboxClaim(p), and returns
	// both results. On an error neither is known to have happened.
	OutboxAckClaim(ctx context.Context, a *OutboxAckParams, p *OutboxClaimParams) (acked int64, rows []*OutboxRow, err error)
}

// OutboxAdmin is the part of an OutboxStore that works outside a business
// transaction: the relay's claims and write-backs and an operator's
// reads and repairs. It is not generic, so the relay and the CLI need only
// it.
type OutboxAdmin interface {
	// Dialect names the SQL dialect the store speaks.
	Dialect() Dialect

	// Tables returns the table names the store was configured with.
	Tables() Tables

	// Classify tells how to treat err, which came from the store.
	Classify(err error) ErrorClass

	// OutboxClaim claims, in one short transaction, at most p.Limit rows
	// that are ready to publish, and returns them with their data. A row
	// is ready when it is not parked, not published, and its AvailableAt is
	// not after p.Now; an unordered row (KeySeq 0) is ready on its own, an
	// ordered row only when no row of its key with a smaller KeySeq is
	// left, or when all of those are claimed by this same claim. Rows
	// locked by another claim are skipped (FOR UPDATE SKIP LOCKED; on SQLite
	// the write lock serialises claims). Each claimed row gets p.Token and
	// AvailableAt p.LeaseUntil: until then no other claim takes it, and
	// after it the row is ready again, for a relay that died.
	//
	// Ordered rows come back grouped by key, in KeySeq order.
	OutboxClaim(ctx context.Context, p *OutboxClaimParams) ([]*OutboxRow, error)

	// OutboxAck records that the broker confirmed the rows p.IDs: it
	// deletes them, or with p.Keep sets their PublishedAt to p.Now. Only
	// rows that still hold p.Token are touched, so a relay whose lease ran
	// out cannot write back over a row that another relay claimed since. It
	// returns the number of rows touched.
	OutboxAck(ctx context.Context, p *OutboxAckParams) (int64, error)

	// OutboxReject records that the broker rejected the row p.ID: its
	// attempts go up by one, its last error is p.Error, and its claim ends,
	// with AvailableAt p.AvailableAt; with p.Park it is parked at p.Now
	// instead. It reports false, and changes nothing, when the row no longer
	// holds p.Token.
	OutboxReject(ctx context.Context, p *OutboxRejectParams) (bool, error)

	// OutboxRelease ends the claim of the rows p.IDs that still hold
	// p.Token, without counting an attempt: they are available again at
	// p.AvailableAt. The relay releases the rows it could not publish
	// because the broker was unreachable, or that it did not try.
	OutboxRelease(ctx context.Context, p *OutboxReleaseParams) (int64, error)

	// OutboxStats counts the outbox's rows. It leaves Lag zero: the
	// caller's clock sets it (inbox.Admin.OutboxStats).
	OutboxStats(ctx context.Context) (*inboxtype.OutboxStats, error)

	// OutboxList lists rows, oldest first.
	OutboxList(ctx context.Context, p *OutboxListParams) ([]*OutboxRow, error)

	// OutboxGet returns one row, or ErrNotFound.
	OutboxGet(ctx context.Context, id string) (*OutboxRow, error)

	// OutboxSet changes one row for an operator (see OutboxAction) and
	// reports whether a row in the state the action applies to was found.
	OutboxSet(ctx context.Context, p *OutboxSetParams) (bool, error)

	// OutboxPurgePublished deletes at most p.Limit rows published before
	// p.Before (rows kept with OutboxAckParams.Keep) and returns how many
	// it deleted.
	OutboxPurgePublished(ctx context.Context, p *OutboxPurgeParams) (int64, error)
}

// MaxOutboxKeyLen is the longest message key, in bytes, that an outbox row
// holds: every dialect indexes the key of ordered rows.
const MaxOutboxKeyLen = 1024

// MaxOutboxTopicLen is the longest topic, in bytes.
const MaxOutboxTopicLen = 512

// OutboxRow is one event in the outbox.
type OutboxRow struct {
	ID          string
	Topic       string
	Key         []byte
	Headers     map[string]string
	Payload     []byte
	CausationID string
	// KeySeq is the row's place among the rows of its key, from 1, in
	// ordered mode; 0 for an unordered row.
	KeySeq    int64
	CreatedAt time.Time
	// AvailableAt is when the row may be claimed: after its creation,
	// after a rejection's backoff, or when a claim's lease ends.
	AvailableAt time.Time
	// Attempts counts the broker's rejections of the row.
	Attempts  int
	LastError string
	// Claimed reports that a relay holds a claim on the row, which may
	// have expired (see AvailableAt).
	Claimed     bool
	PublishedAt time.Time
	ParkedAt    time.Time
}

// OutboxEnqueueParams are the rows of one enqueue.
type OutboxEnqueueParams struct {
	Rows    []OutboxRow
	Ordered bool
}

// OutboxClaimParams are the parameters of a claim.
type OutboxClaimParams struct {
	// Token is the claim's fencing token, unique per claim.
	Token string
	// Now is the time rows must be available at.
	Now time.Time
	// LeaseUntil is when the claim lapses.
	LeaseUntil time.Time
	Limit      int
	// WholeRuns asks the ordered claim for whole runs of few keys rather
	// than a head of each key: it takes the keys one after another, from
	// where the walk of the keys resumes, each with its ready run, until
	// the runs fill Limit (the last cut to fit), and locks only the keys
	// it takes, so that concurrent claims get other keys. Without it, the
	// claim takes the head of every ready key, up to Limit keys, and cuts
	// the runs behind them by position: the first row of each key, then
	// the second, and so on. Either way a claim takes a prefix of each
	// key's ready run. The relay sets it for a sink that keeps a key's
	// order within one call, which gets a key's run in one call.
	WholeRuns bool
}

// OutboxAckParams name rows the broker confirmed.
type OutboxAckParams struct {
	IDs   []string
	Token string
	// Keep marks the rows published at Now instead of deleting them.
	Keep bool
	Now  time.Time
}

// OutboxRejectParams describe a rejection.
type OutboxRejectParams struct {
	ID    string
	Token string
	Error string
	// AvailableAt is when the row may be tried again.
	AvailableAt time.Time
	// Park parks the row at Now: its rejections used up its budget.
	Park bool
	Now  time.Time
}

// OutboxReleaseParams name rows whose claim ends without an attempt.
type OutboxReleaseParams struct {
	IDs         []string
	Token       string
	AvailableAt time.Time
}

// OutboxState selects rows by state in a listing.
type OutboxState string

// The states of an outbox row.
const (
	OutboxPending   OutboxState = "pending"
	OutboxParked    OutboxState = "parked"
	OutboxPublished OutboxState = "published"
)

// OutboxListParams filter a listing.
type OutboxListParams struct {
	// State selects the rows; empty lists every row.
	State OutboxState
	Limit int
}

// OutboxAction is an operator's change to a row.
type OutboxAction string

// The operator's actions.
const (
	// OutboxRetryNow makes a pending row available at Now, cutting its
	// backoff short.
	OutboxRetryNow OutboxAction = "retry"
	// OutboxParkRow parks a pending row at Now, so that no relay publishes
	// it; in ordered mode its key waits behind it.
	OutboxParkRow OutboxAction = "park"
	// OutboxUnpark returns a parked row to pending, available at Now, with
	// its attempts reset.
	OutboxUnpark OutboxAction = "unpark"
)

// OutboxSetParams name one row and an action on it.
type OutboxSetParams struct {
	ID     string
	Action OutboxAction
	Now    time.Time
}

// OutboxPurgeParams select published rows to delete.
type OutboxPurgeParams struct {
	Before time.Time
	Limit  int
}

// SortOutboxRows puts the rows of a claim in the order OutboxClaim returns
// them: unordered rows first, as they came, then the ordered rows grouped
// by key in order of each key's first row, in KeySeq order.
func SortOutboxRows(rows []*OutboxRow) {
	first := make(map[string]int)
	for i, r := range rows {
		if r.KeySeq == 0 {
			continue
		}
		if _, ok := first[string(r.Key)]; !ok {
			first[string(r.Key)] = i
		}
	}
	rank := func(r *OutboxRow, i int) (int, int64) {
		if r.KeySeq == 0 {
			return -1, int64(i)
		}
		return first[string(r.Key)], r.KeySeq
	}
	idx := make(map[*OutboxRow]int, len(rows))
	for i, r := range rows {
		idx[r] = i
	}
	slices.SortStableFunc(rows, func(a, b *OutboxRow) int {
		ka, sa := rank(a, idx[a])
		kb, sb := rank(b, idx[b])
		if c := cmp.Compare(ka, kb); c != 0 {
			return c
		}
		return cmp.Compare(sa, sb)
	})
}

// UnknownOutboxAction is the error of OutboxSet for an action it does not
// know.
func UnknownOutboxAction(a OutboxAction) error {
	return fmt.Errorf("inbox: unknown outbox action %q: want %q, %q or %q", a, OutboxRetryNow, OutboxParkRow, OutboxUnpark)
}

// OutboxKeyCursor is where a store's ordered claims resume their walk of
// the keys that have pending events: after the last key whose head the
// claim before took, wrapping round to the first key, so that when more
// keys are ready than a claim takes, every key gets its turn. It is a hint
// kept in memory, one per store value, safe for concurrent use; the zero
// value starts at the first key.
type OutboxKeyCursor struct {
	mu  sync.Mutex
	key []byte
}

// Key returns the key the next claim's walk starts after, never nil: the
// walk takes the keys greater than it, then, wrapping round, the others.
func (c *OutboxKeyCursor) Key() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.key == nil {
		return []byte{}
	}
	return c.key
}

// Advance moves the cursor to the last key, in the order of a walk that
// started after from, of the ordered rows claimed: the greatest of those
// not greater than from (the walk wrapped round to them), or else the
// greatest of all. It changes nothing when no ordered row was claimed.
func (c *OutboxKeyCursor) Advance(from []byte, claimed []*OutboxRow) {
	var wrapped, after []byte
	for _, r := range claimed {
		switch {
		case r.KeySeq == 0:
		case bytes.Compare(r.Key, from) <= 0:
			if wrapped == nil || bytes.Compare(r.Key, wrapped) > 0 {
				wrapped = r.Key
			}
		default:
			if after == nil || bytes.Compare(r.Key, after) > 0 {
				after = r.Key
			}
		}
	}
	last := wrapped
	if last == nil {
		last = after
	}
	if last == nil {
		return
	}
	c.Set(last)
}

// Set moves the cursor to key: the next walk starts after it.
func (c *OutboxKeyCursor) Set(key []byte) {
	c.mu.Lock()
	c.key = bytes.Clone(key)
	c.mu.Unlock()
}
