package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/internal/fault"
	"github.com/txinbox/inbox/internal/uuid"
)

// Defaults of the RelayConfig fields.
const (
	DefaultBatchSize          = 100
	DefaultWorkers            = 4
	DefaultLease              = 30 * time.Second
	DefaultPollInterval       = time.Second
	DefaultMaxRejections      = 10
	DefaultUnavailableBackoff = 100 * time.Millisecond
	// MaxBatchSize bounds RelayConfig.BatchSize, so that a claim's write-
	// backs stay within every engine's limit on bind parameters.
	MaxBatchSize = 5000
	// MaxUnavailableBackoff caps the relay's pause while the broker or the
	// store is unavailable.
	MaxUnavailableBackoff = 30 * time.Second
	// maxRejectBackoff caps DefaultBackoff.
	maxRejectBackoff = 5 * time.Minute
)

// wakeRechecks is how many times, after a wake, a relay that found nothing
// looks again, waiting 1ms, 2ms, 4ms and so on in between: a wake from
// EnqueueTx comes before the transaction commits.
const wakeRechecks = 10

// RelayConfig configures a Relay. The zero value is valid.
type RelayConfig struct {
	// BatchSize is the most rows one claim takes. Defaults to
	// DefaultBatchSize (100).
	BatchSize int

	// Workers is how many batches Run has in flight at once, each claimed,
	// published and written back on its own: while one batch waits for
	// the broker's acknowledgements, another is being claimed or deleted.
	// One worker keeps at most one batch in flight. Defaults to
	// DefaultWorkers (4).
	Workers int

	// Lease is how long a claim holds its rows: another relay takes them
	// only after it, so a relay that died delays its rows by at most the
	// lease. Publishing a batch must end well within it: the sink's context
	// ends at nine tenths of it. Relays' clocks must agree to within a small
	// part of it. Defaults to DefaultLease (30s).
	Lease time.Duration

	// PollInterval is how long the relay waits when it found nothing to
	// publish, unless it is woken. Defaults to DefaultPollInterval (1s).
	PollInterval time.Duration

	// MaxRejections is how many times the broker may reject an event
	// before the relay parks it for an operator (inbox outbox unpark).
	// Failures to reach the broker never count. Defaults to
	// DefaultMaxRejections (10).
	MaxRejections int

	// Backoff returns how long an event waits after its n-th rejection.
	// In ordered mode its key waits with it. Defaults to DefaultBackoff.
	Backoff func(n int) time.Duration

	// UnavailableBackoff is the relay's first pause after the broker or the
	// store was unavailable; it doubles while they stay so, up to
	// MaxUnavailableBackoff. Defaults to DefaultUnavailableBackoff (100ms).
	UnavailableBackoff time.Duration

	// KeepPublished keeps published rows, marked with their publish time,
	// instead of deleting them, for audit and replay; delete them later
	// with PurgePublished. Defaults to false.
	KeepPublished bool

	// Logger receives the relay's logs. Defaults to nil, which is silent.
	Logger *slog.Logger

	// Observer, if set, is told about claims, publishes and parked events.
	// Defaults to nil.
	Observer Observer

	// Now returns the current time, which places leases and backoffs.
	// Defaults to time.Now.
	Now func() time.Time
}

// DefaultBackoff waits one second after the first rejection, doubling after
// each, up to five minutes.
func DefaultBackoff(n int) time.Duration {
	if n < 1 {
		n = 1
	}
	if n > 20 {
		return maxRejectBackoff
	}
	return min(time.Second<<(n-1), maxRejectBackoff)
}

func (c *RelayConfig) withDefaults() RelayConfig {
	var out RelayConfig
	if c != nil {
		out = *c
	}
	if out.BatchSize == 0 {
		out.BatchSize = DefaultBatchSize
	}
	if out.Workers == 0 {
		out.Workers = DefaultWorkers
	}
	if out.Lease == 0 {
		out.Lease = DefaultLease
	}
	if out.PollInterval == 0 {
		out.PollInterval = DefaultPollInterval
	}
	if out.MaxRejections == 0 {
		out.MaxRejections = DefaultMaxRejections
	}
	if out.Backoff == nil {
		out.Backoff = DefaultBackoff
	}
	if out.UnavailableBackoff == 0 {
		out.UnavailableBackoff = DefaultUnavailableBackoff
	}
	if out.Now == nil {
		out.Now = time.Now
	}
	return out
}

func (c *RelayConfig) validate() error {
	switch {
	case c.BatchSize < 0 || c.BatchSize > MaxBatchSize:
		return fmt.Errorf("outbox: RelayConfig.BatchSize must be from 1 to %d, got %d", MaxBatchSize, c.BatchSize)
	case c.Workers < 0:
		return fmt.Errorf("outbox: RelayConfig.Workers must be positive, got %d", c.Workers)
	case c.Lease < 10*time.Millisecond:
		return fmt.Errorf("outbox: RelayConfig.Lease must be at least 10ms, got %v", c.Lease)
	case c.PollInterval < 0:
		return fmt.Errorf("outbox: RelayConfig.PollInterval must be positive, got %v", c.PollInterval)
	case c.MaxRejections < 0:
		return fmt.Errorf("outbox: RelayConfig.MaxRejections must be positive, got %d", c.MaxRejections)
	case c.UnavailableBackoff < 0:
		return fmt.Errorf("outbox: RelayConfig.UnavailableBackoff must be positive, got %v", c.UnavailableBackoff)
	}
	return nil
}

// Relay publishes the outbox's events to a Sink. Any number of relays, in
// one process or many, may run over one outbox table: each claims its rows
// in a short transaction (FOR UPDATE SKIP LOCKED, a lease and a fencing
// token), publishes them outside any transaction, and deletes only the
// rows the broker confirmed and that its token still holds.
//
// A relay that dies between the broker's confirmation and the delete
// leaves its rows to be published again when the lease ends: with the same
// event ids, so the consumer's inbox skips them.
type Relay struct {
	store  inboxdriver.OutboxAdmin
	sink   Sink
	config RelayConfig
	// runs is whether the sink takes a key's run in one call
	// (KeyOrderSink).
	runs      bool
	logger    *slog.Logger
	subscribe func(*Relay) func()

	mu    sync.Mutex
	wakes map[chan struct{}]struct{}
}

// NewRelay returns a relay of the outbox in store to sink. config may be
// nil. A relay made by Outbox.NewRelay is also woken by that Outbox's
// enqueues.
func NewRelay(store inboxdriver.OutboxAdmin, sink Sink, config *RelayConfig) (*Relay, error) {
	if store == nil {
		return nil, errors.New("outbox: NewRelay: store is nil")
	}
	if sink == nil {
		return nil, errors.New("outbox: NewRelay: sink is nil")
	}
	cfg := config.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	r := &Relay{store: store, sink: sink, config: cfg, logger: logger, wakes: map[chan struct{}]struct{}{}}
	if ks, ok := sink.(KeyOrderSink); ok {
		r.runs = ks.KeepsKeyOrder()
	}
	return r, nil
}

// NewRelay returns a relay of o's table to sink, which o's enqueues wake
// while it runs.
func (o *Outbox[TTx]) NewRelay(sink Sink, config *RelayConfig) (*Relay, error) {
	r, err := NewRelay(o.store, sink, config)
	if err != nil {
		return nil, err
	}
	r.subscribe = o.subscribe
	return r, nil
}

// Config returns the relay's configuration with defaults applied.
func (r *Relay) Config() RelayConfig { return r.config }

// Wake tells the relay that events were committed, so that one of its
// idle workers looks now rather than at its next poll. It never blocks.
func (r *Relay) Wake() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for c := range r.wakes {
		select {
		case c <- struct{}{}:
			return
		default:
		}
	}
}

// Run relays until ctx ends, and then returns nil, with Workers loops of
// claim, publish and write-back. Failures of the store and of the broker
// are logged and waited out, with backoff; they never stop it.
func (r *Relay) Run(ctx context.Context) error {
	if r.subscribe != nil {
		defer r.subscribe(r)()
	}
	var wg sync.WaitGroup
	for range r.config.Workers {
		wake := make(chan struct{}, 1)
		r.mu.Lock()
		r.wakes[wake] = struct{}{}
		r.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				r.mu.Lock()
				delete(r.wakes, wake)
				r.mu.Unlock()
			}()
			r.loop(ctx, wake)
		}()
	}
	wg.Wait()
	return nil
}

// loop is one worker of Run.
func (r *Relay) loop(ctx context.Context, wake <-chan struct{}) {
	backoff := time.Duration(0)
	rechecks := wakeRechecks // none until a wake
	// carry is the write-back of the last full batch, which goes with the
	// next claim (inboxdriver.OutboxAckClaimer).
	var carry *inboxdriver.OutboxAckParams
	defer func() {
		if carry != nil {
			r.flush(ctx, carry)
		}
	}()
	for ctx.Err() == nil {
		res, next, err := r.round(ctx, carry, true)
		carry = next
		if ctx.Err() != nil {
			return
		}
		var wait time.Duration
		switch {
		case err != nil || res.Unavailable > 0:
			if backoff == 0 {
				if err == nil {
					err = res.UnavailableErr
				}
				r.logger.WarnContext(ctx, "outbox: relay paused: unavailable", "err", err)
				backoff = r.config.UnavailableBackoff
			} else {
				backoff = min(backoff*2, MaxUnavailableBackoff)
			}
			wait = backoff
		case res.Claimed > 0:
			if backoff > 0 {
				r.logger.InfoContext(ctx, "outbox: relay resumed")
				backoff = 0
			}
			continue
		case rechecks < wakeRechecks:
			wait = time.Millisecond << rechecks
			rechecks++
		default:
			wait = r.config.PollInterval
		}
		if carry != nil {
			r.flush(ctx, carry)
			carry = nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-wake:
			rechecks = 0
			if backoff > 0 {
				// The broker or store is down: a wake does not cut the
				// pause short.
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
			}
			t.Stop()
		case <-t.C:
		}
	}
}

// flush writes back a carried acknowledgement on its own.
func (r *Relay) flush(ctx context.Context, a *inboxdriver.OutboxAckParams) {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	n, err := r.store.OutboxAck(wctx, a)
	if err != nil {
		r.logger.WarnContext(ctx, "outbox: delete published events failed: they will be published again", "events", len(a.IDs), "err", err)
		return
	}
	r.lapsed(ctx, len(a.IDs)-int(n))
}

func (r *Relay) lapsed(ctx context.Context, n int) {
	if n > 0 {
		r.logger.WarnContext(ctx, "outbox: claim lapsed before the write-back: those events may be published again", "events", n, "lease", r.config.Lease)
	}
}

// Result is what one relay round did.
type Result struct {
	// Claimed counts the rows the claim took.
	Claimed int
	// Published counts the rows the broker confirmed.
	Published int
	// Rejected counts the rows the broker rejected, Parked those of them
	// that used up their budget.
	Rejected int
	Parked   int
	// Unavailable counts the rows not published because the broker was
	// unavailable; UnavailableErr is the first such error. The rows of the
	// batch not tried after that are released too, as are, in ordered
	// mode, the rows of a key after its first failure.
	Unavailable    int
	UnavailableErr error
	// Lapsed counts confirmed rows whose claim had lapsed by the time the
	// relay wrote back: another relay may publish them again.
	Lapsed int
}

// row outcomes of a round
const (
	untried = iota
	confirmed
	rejected
	unavailable
)

// RelayOnce claims one batch, publishes it and writes the outcome back. It
// is what Run repeats; tests and tools call it to relay step by step.
func (r *Relay) RelayOnce(ctx context.Context) (Result, error) {
	res, _, err := r.round(ctx, nil, false)
	return res, err
}

// round is RelayOnce. carry, if not nil, is the write-back of the round
// before, to send with this round's claim; with deferAck, a full batch's
// write-back of its confirmed rows is returned instead of sent, for the
// next round's claim to carry. A store that cannot send both at once gets
// them one after the other.
//
// A round claims a batch, publishes it, and writes back what the broker
// did with each row: it deletes (or, with KeepPublished, marks) the
// confirmed rows, records the rejections, and releases the rows it could
// not publish.
func (r *Relay) round(ctx context.Context, carry *inboxdriver.OutboxAckParams, deferAck bool) (Result, *inboxdriver.OutboxAckParams, error) {
	var res Result
	start := time.Now()
	now := r.config.Now()
	b := &claimedBatch{token: uuid.V4()}
	claim := &inboxdriver.OutboxClaimParams{
		Token: b.token, Now: now, LeaseUntil: now.Add(r.config.Lease), Limit: r.config.BatchSize,
		// A sink that takes a key's run in one call gets whole runs of few
		// keys, and the other workers the other keys.
		WholeRuns: r.runs,
	}
	var err error
	b.rows, res.Lapsed, err = r.claim(ctx, carry, claim)
	if err != nil {
		return res, nil, fmt.Errorf("outbox: claim: %w", classify(r.store, err))
	}
	res.Claimed = len(b.rows)
	if obs := r.config.Observer; obs != nil {
		obs.Claimed(ctx, &ClaimEvent{Rows: len(b.rows), Duration: time.Since(start)})
	}
	if len(b.rows) == 0 {
		return res, nil, nil
	}

	r.publishBatch(ctx, b, now)

	// Write back even when ctx ended: a confirmed row left claimed would
	// only be published again after its lease.
	wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer wcancel()
	var errs []error
	next, err := r.ack(ctx, wctx, b, deferAck, &res)
	errs = append(errs, err)
	errs = append(errs, r.reject(ctx, wctx, b, &res)...)
	errs = append(errs, r.release(wctx, b, &res))
	return res, next, errors.Join(errs...)
}

// claimedBatch is the rows a round claimed, under its fencing token, and
// what publishing did with each of them.
type claimedBatch struct {
	token   string
	rows    []*inboxdriver.OutboxRow
	outcome []int   // per row: untried, confirmed, rejected or unavailable
	errs    []error // per row: the broker's error, if any
}

// claim claims a batch with claim, sending carry with it if the store can
// (inboxdriver.OutboxAckClaimer), or else before it. It returns the rows
// and how many of carry's rows had lapsed.
func (r *Relay) claim(ctx context.Context, carry *inboxdriver.OutboxAckParams, claim *inboxdriver.OutboxClaimParams) ([]*inboxdriver.OutboxRow, int, error) {
	ackClaimer, _ := r.store.(inboxdriver.OutboxAckClaimer)
	if carry != nil && ackClaimer == nil {
		r.flush(ctx, carry)
		carry = nil
	}
	var rows []*inboxdriver.OutboxRow
	var lapsed int
	var err error
	// A claim that lost a deadlock or a serialization check changed
	// nothing: run it again at once, a few times.
	for range 3 {
		if carry != nil {
			var n int64
			n, rows, err = ackClaimer.OutboxAckClaim(ctx, carry, claim)
			if err == nil {
				r.lapsed(ctx, len(carry.IDs)-int(n))
				lapsed += len(carry.IDs) - int(n)
				carry = nil
			}
		} else {
			rows, err = r.store.OutboxClaim(ctx, claim)
		}
		if err == nil || r.store.Classify(err) != inboxdriver.ClassConflict {
			break
		}
	}
	if carry != nil {
		// The claim failed, and the write-back with it: send it alone.
		r.flush(ctx, carry)
	}
	return rows, lapsed, err
}

// publishBatch publishes b's rows, within nine tenths of the lease, and
// tells the observer how it went. now is the time of the claim.
func (r *Relay) publishBatch(ctx context.Context, b *claimedBatch, now time.Time) {
	b.outcome = make([]int, len(b.rows))
	b.errs = make([]error, len(b.rows))
	pctx, cancel := context.WithTimeout(ctx, r.config.Lease*9/10)
	start := time.Now()
	r.publish(pctx, b.rows, b.outcome, b.errs)
	cancel()
	fault.Inject(ctx, fault.RelayAfterPublish)
	obs := r.config.Observer
	if obs == nil {
		return
	}
	ev := &PublishEvent{Records: len(b.rows), Duration: time.Since(start)}
	for i, o := range b.outcome {
		switch o {
		case confirmed:
			ev.Confirmed++
			ev.MaxAge = max(ev.MaxAge, now.Sub(b.rows[i].CreatedAt))
		case rejected:
			ev.Rejected++
		default:
			ev.Unavailable++
		}
	}
	obs.Published(ctx, ev)
}

// ack deletes (or marks) b's confirmed rows. With deferAck, a full batch
// that the broker confirmed whole returns its write-back instead, for the
// next claim to carry, if the store can carry it.
func (r *Relay) ack(ctx, wctx context.Context, b *claimedBatch, deferAck bool, res *Result) (*inboxdriver.OutboxAckParams, error) {
	var acked []string
	for i, o := range b.outcome {
		if o == confirmed {
			acked = append(acked, b.rows[i].ID)
		}
	}
	if len(acked) == 0 {
		return nil, nil
	}
	a := &inboxdriver.OutboxAckParams{IDs: acked, Token: b.token, Keep: r.config.KeepPublished, Now: r.config.Now()}
	res.Published = len(acked)
	_, ackClaimer := r.store.(inboxdriver.OutboxAckClaimer)
	if deferAck && len(b.rows) == r.config.BatchSize && len(acked) == len(b.rows) && ackClaimer {
		return a, nil // more is likely waiting: the next claim carries it
	}
	n, err := r.store.OutboxAck(wctx, a)
	if err != nil {
		res.Published = 0
		return nil, fmt.Errorf("outbox: delete %d published events: %w", len(acked), classify(r.store, err))
	}
	res.Lapsed += len(acked) - int(n)
	r.lapsed(ctx, len(acked)-int(n))
	return nil, nil
}

// reject records the broker's rejections of b's rows, parking those that
// used up their budget, and returns the rejections it could not record.
func (r *Relay) reject(ctx, wctx context.Context, b *claimedBatch, res *Result) []error {
	var errs []error
	for i, o := range b.outcome {
		if o != rejected {
			continue
		}
		row := b.rows[i]
		n := row.Attempts + 1
		park := n >= r.config.MaxRejections
		ok, err := r.store.OutboxReject(wctx, &inboxdriver.OutboxRejectParams{
			ID: row.ID, Token: b.token, Error: clipError(b.errs[i]), Park: park,
			AvailableAt: r.config.Now().Add(r.config.Backoff(n)), Now: r.config.Now(),
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("outbox: record the rejection of %s: %w", row.ID, classify(r.store, err)))
			continue
		}
		res.Rejected++
		if !ok {
			continue
		}
		if park {
			res.Parked++
			r.logger.ErrorContext(ctx, "outbox: event parked after its rejections", "id", row.ID, "topic", row.Topic, "rejections", n, "err", b.errs[i])
			if obs := r.config.Observer; obs != nil {
				obs.Parked(ctx, &ParkEvent{ID: row.ID, Topic: row.Topic, Rejections: n, Err: b.errs[i]})
			}
		} else {
			r.logger.WarnContext(ctx, "outbox: broker rejected an event", "id", row.ID, "topic", row.Topic, "rejections", n, "err", b.errs[i])
		}
	}
	return errs
}

// release makes b's rows that were not published available again at
// once: those the broker was unavailable for, and those not tried after.
func (r *Relay) release(wctx context.Context, b *claimedBatch, res *Result) error {
	var release []string
	for i, o := range b.outcome {
		switch o {
		case untried:
			release = append(release, b.rows[i].ID)
		case unavailable:
			release = append(release, b.rows[i].ID)
			res.Unavailable++
			if res.UnavailableErr == nil {
				res.UnavailableErr = b.errs[i]
			}
		}
	}
	if len(release) == 0 {
		return nil
	}
	if _, err := r.store.OutboxRelease(wctx, &inboxdriver.OutboxReleaseParams{IDs: release, Token: b.token, AvailableAt: r.config.Now()}); err != nil {
		return fmt.Errorf("outbox: release %d events: %w", len(release), classify(r.store, err))
	}
	return nil
}

// publish publishes rows in rounds. Unordered rows all go in the first
// round. Ordered rows come grouped by key in sequence order; each round
// holds, for each key, the next row after the key's last confirmed row, so
// that no sink is asked to keep order within a call, and a key stops at its
// first failure while the others go on. A KeyOrderSink that keeps order
// gets instead the key's next rows up to the first that goes to another
// topic, and a key stops at the first of them that failed.
func (r *Relay) publish(ctx context.Context, rows []*inboxdriver.OutboxRow, outcome []int, errs []error) {
	var batch []int
	var runs [][]int // per key: its rows' indexes, in order
	at := map[string]int{}
	for i, row := range rows {
		if row.KeySeq == 0 {
			batch = append(batch, i)
			continue
		}
		k, ok := at[string(row.Key)]
		if !ok {
			k = len(runs)
			at[string(row.Key)] = k
			runs = append(runs, nil)
		}
		runs[k] = append(runs[k], i)
	}
	pos := make([]int, len(runs))  // per key: its next row to send
	sent := make([]int, len(runs)) // per key: how many rows this round sends
	for round := 0; ; round++ {
		if round > 0 {
			batch = batch[:0]
		}
		free := len(batch) // the unordered rows, in the first round
		for k, run := range runs {
			sent[k] = 0
			for j := pos[k]; j < len(run); j++ {
				if j > pos[k] && (!r.runs || rows[run[j]].Topic != rows[run[pos[k]]].Topic) {
					break
				}
				batch = append(batch, run[j])
				sent[k]++
			}
		}
		if len(batch) == 0 {
			return
		}
		recs := make([]Record, len(batch))
		for j, i := range batch {
			recs[j] = record(rows[i])
		}
		got := r.sink.Publish(ctx, recs)
		if len(got) != len(recs) {
			err := Unavailable(fmt.Errorf("outbox: the sink returned %d results for %d records", len(got), len(recs)))
			got = make([]error, len(recs))
			for j := range got {
				got[j] = err
			}
		}
		down := false
		set := func(i int, err error) {
			switch {
			case err == nil:
				outcome[i] = confirmed
			case IsUnavailable(err):
				outcome[i], errs[i] = unavailable, err
				down = true
			default:
				outcome[i], errs[i] = rejected, err
			}
		}
		for j, i := range batch[:free] {
			set(i, got[j])
		}
		next := free // got's first result of the key's rows
		for k, run := range runs {
			res := got[next : next+sent[k]]
			next += sent[k]
			for _, err := range res {
				i := run[pos[k]]
				set(i, err)
				if outcome[i] != confirmed {
					// The key stops at its first failure: the rest of
					// its rows stay untried, and are released.
					pos[k] = len(run)
					break
				}
				pos[k]++
			}
		}
		if down {
			return
		}
	}
}

// record is the Record of row.
func record(row *inboxdriver.OutboxRow) Record {
	h := make(map[string]string, len(row.Headers)+3)
	for k, v := range row.Headers {
		h[k] = v
	}
	h[HeaderEventID] = row.ID
	if row.CausationID != "" {
		h[HeaderCausationID] = row.CausationID
	}
	if row.KeySeq > 0 {
		h[HeaderKeySeq] = strconv.FormatInt(row.KeySeq, 10)
	}
	return Record{
		ID: row.ID, Topic: row.Topic, Key: row.Key, Headers: h, Payload: row.Payload,
		KeySeq: row.KeySeq, CreatedAt: row.CreatedAt, Attempt: row.Attempts,
	}
}

// clipError is the stored text of a rejection.
func clipError(err error) string {
	const max = 2000
	if err == nil {
		return ""
	}
	s := err.Error()
	if len(s) > max {
		s = s[:max] + "…"
	}
	return s
}
