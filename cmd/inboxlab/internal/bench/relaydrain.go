package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/outbox"
)

// The relay catching up: drain rows, each of which times one relay, with
// the default configuration, emptying a backlog enqueued beforehand. The
// ordered rows drain a backlog over relayKeys keys at each of
// Config.RelayBacklogs, the unordered rows the same events at the largest
// one; each row drains to a sink that keeps nothing and to kfake. The
// targets compare the ordered relay at the largest backlog with itself at
// the smallest (a cost linear in the backlog keeps the rate) and with the
// unordered relay.
//
// The drains run on an outbox in a schema of their own, emptied before
// each: the backlog is enqueued through Outbox.Enqueue, relayEnqueueBatch
// events to a transaction, so that the ordered rows carry the key sequence
// numbers an enqueue gives them, and the table is analysed before the
// relay starts. None of that is timed.

// relayKeys is how many keys an ordered backlog spreads over.
const relayKeys = 4

// relayEnqueueBatch is how many events one enqueue of a backlog writes.
const relayEnqueueBatch = 5000

// drainRow is a drain of the relay: ordered or not, to the null sink or to
// kfake.
type drainRow struct {
	name    string
	ordered bool
	kafka   bool
}

// drainRows are every drain row, in the order of the report.
var drainRows = []*drainRow{
	{name: "relay-ordered-" + strconv.Itoa(relayKeys) + "-keys-null", ordered: true},
	{name: "relay-unordered-null"},
	{name: "relay-ordered-" + strconv.Itoa(relayKeys) + "-keys-kfake", ordered: true, kafka: true},
	{name: "relay-unordered-kfake", kafka: true},
}

// selectDrains returns the drain rows cfg asks for: every one when it
// names no row, else those it names; none without backlogs.
func selectDrains(cfg Config) []*drainRow {
	if len(cfg.RelayBacklogs) == 0 {
		return nil
	}
	var out []*drainRow
	for _, d := range drainRows {
		if len(cfg.Rows) == 0 || contains(cfg.Rows, d.name) {
			out = append(out, d)
		}
	}
	return out
}

// backlogs returns the backlogs d drains, from backlogs, the sorted
// Config.RelayBacklogs: the ordered rows each, the unordered the largest.
func (d *drainRow) backlogs(backlogs []int) []int {
	if d.ordered {
		return backlogs
	}
	return backlogs[len(backlogs)-1:]
}

// RelayResult is the drain rows' section of the report.
type RelayResult struct {
	// Batch is the relay's batch size and Workers its batches in flight;
	// Keys is how many keys an ordered backlog spreads over.
	Batch   int `json:"batch"`
	Workers int `json:"workers"`
	Keys    int `json:"keys"`
	// Backlogs are the backlogs of the ordered rows, smallest first; the
	// unordered rows drain the largest.
	Backlogs []int `json:"backlogs"`
	// Rounds is how many times each drain ran, each round in a new order.
	Rounds int `json:"rounds"`
	// Drains has one entry per drain row and backlog (its Events): the
	// median of the rounds' rates, and each round's.
	Drains []Drain `json:"drains"`
}

// relayStore is the drains' outbox, in a schema of its own.
type relayStore struct {
	pool               *pgxpool.Pool
	tables             []string // the outbox's tables, to empty
	outbox             string
	ordered, unordered *outbox.Outbox[pgx.Tx]
}

// openRelayStore creates the drains' schema, migrates the outbox into it
// and opens a pool of its own, with a connection for each of the relay's
// workers and one for the enqueue; close drops the schema.
func (b *bench) openRelayStore(ctx context.Context) (*relayStore, func(), error) {
	schema := b.schema + "_relay"
	drop, err := b.createSchema(ctx, schema)
	if err != nil {
		return nil, nil, err
	}
	s := &relayStore{}
	closeFn := func() {
		if s.pool != nil {
			s.pool.Close()
		}
		drop()
	}
	pcfg, err := pgxpool.ParseConfig(b.cfg.DatabaseURL)
	if err != nil {
		closeFn()
		return nil, nil, fmt.Errorf("database URL: %w", err)
	}
	pcfg.MaxConns = outbox.DefaultWorkers + 1
	if s.pool, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
		closeFn()
		return nil, nil, fmt.Errorf("relay pool: %w", err)
	}
	tables := inboxdriver.Tables{Schema: schema}
	client, err := newInbox(ctx, b.admin, s.pool, tables)
	if err != nil {
		closeFn()
		return nil, nil, err
	}
	d, ok := client.Driver().(*inboxpgx.Driver)
	if !ok {
		closeFn()
		return nil, nil, fmt.Errorf("the relay's store is not inboxpgx")
	}
	if s.ordered, err = outbox.New(d, &outbox.Config{Ordered: true}); err != nil {
		closeFn()
		return nil, nil, err
	}
	if s.unordered, err = outbox.New(d, nil); err != nil {
		closeFn()
		return nil, nil, err
	}
	t := tables.WithDefaults()
	s.outbox = pgx.Identifier{schema, t.Outbox}.Sanitize()
	s.tables = []string{s.outbox, pgx.Identifier{schema, t.OutboxKeys}.Sanitize()}
	return s, closeFn, nil
}

// fill empties the outbox and enqueues a backlog of n events over
// relayKeys keys, in ordered mode or not, then analyses the table.
func (s *relayStore) fill(ctx context.Context, n int, ordered bool) error {
	if _, err := s.pool.Exec(ctx, `TRUNCATE `+strings.Join(s.tables, ", ")); err != nil {
		return fmt.Errorf("empty the relay's outbox: %w", err)
	}
	o := s.unordered
	if ordered {
		o = s.ordered
	}
	keys := make([][]byte, relayKeys)
	for i := range keys {
		keys[i] = []byte("key-" + strconv.Itoa(i))
	}
	for i := 0; i < n; i += relayEnqueueBatch {
		msgs := make([]outbox.Message, min(relayEnqueueBatch, n-i))
		for j := range msgs {
			msgs[j] = outbox.Message{Topic: "orders", Key: keys[(i+j)%relayKeys], Payload: outboxPayload}
		}
		if _, err := o.Enqueue(ctx, msgs...); err != nil {
			return fmt.Errorf("enqueue the relay's backlog: %w", err)
		}
	}
	if _, err := s.pool.Exec(ctx, `ANALYZE `+s.outbox); err != nil {
		return fmt.Errorf("analyse the relay's outbox: %w", err)
	}
	return nil
}

// drainCell is a drain row at one backlog, and its rounds' rates.
type drainCell struct {
	row     *drainRow
	backlog int
	rates   []float64
}

// runRelay runs the drain rows: in each round, every row at each of its
// backlogs, in a new order.
func (b *bench) runRelay(ctx context.Context, rng *rand.Rand, drains []*drainRow) (*RelayResult, error) {
	backlogs := slices.Clone(b.cfg.RelayBacklogs)
	slices.Sort(backlogs)
	backlogs = slices.Compact(backlogs)
	res := &RelayResult{Batch: outbox.DefaultBatchSize, Workers: outbox.DefaultWorkers, Keys: relayKeys, Backlogs: backlogs, Rounds: b.cfg.RelayRounds}
	s, closeStore, err := b.openRelayStore(ctx)
	if err != nil {
		return nil, err
	}
	defer closeStore()
	var kafka outbox.Sink
	if slices.ContainsFunc(drains, func(d *drainRow) bool { return d.kafka }) {
		k, sink, err := openKfakeSink(ctx)
		if err != nil {
			return nil, err
		}
		defer k.Close()
		kafka = sink
	}
	var cells []*drainCell
	for _, d := range drains {
		for _, n := range d.backlogs(backlogs) {
			cells = append(cells, &drainCell{row: d, backlog: n})
		}
	}
	for round := range b.cfg.RelayRounds {
		for _, i := range rng.Perm(len(cells)) {
			c := cells[i]
			b.logf("relay: round %d of %d: %s, a backlog of %d", round+1, b.cfg.RelayRounds, c.row.name, c.backlog)
			if err := s.fill(ctx, c.backlog, c.row.ordered); err != nil {
				return nil, err
			}
			var sink outbox.Sink = &outbox.MemorySink{Discard: true}
			if c.row.kafka {
				sink = kafka
			}
			o := s.unordered
			if c.row.ordered {
				o = s.ordered
			}
			counted := newCountSink(sink, c.backlog)
			rate, err := timeDrain(ctx, o, counted)
			if err != nil {
				return nil, err
			}
			// The drain published the backlog it was given: ordered events
			// carry their key's sequence numbers, unordered ones none.
			want := int64(0)
			if c.row.ordered {
				want = int64(c.backlog)
			}
			if counted.ordered.Load() != want {
				return nil, fmt.Errorf("%s published %d events with a key sequence number, want %d", c.row.name, counted.ordered.Load(), want)
			}
			b.logf("relay: %.0f msgs/s in %d calls of the sink", rate, counted.calls.Load())
			c.rates = append(c.rates, round1(rate))
		}
	}
	for _, c := range cells {
		res.Drains = append(res.Drains, Drain{Name: c.row.name, Events: c.backlog, MsgsPerS: round1(median(c.rates)), RoundRates: c.rates})
	}
	return res, nil
}

// relayRatios are the drain rows' targets.
func (r *Report) relayRatios() []Ratio {
	rl := r.Relay
	if rl == nil || len(rl.Backlogs) == 0 {
		return nil
	}
	get := func(name string, events int) *Drain {
		for i := range rl.Drains {
			if rl.Drains[i].Name == name && rl.Drains[i].Events == events {
				return &rl.Drains[i]
			}
		}
		return nil
	}
	ratio := func(x, y *Drain) float64 { return roundRatio(x.RoundRates, y.RoundRates, x.MsgsPerS, y.MsgsPerS) }
	small, large := rl.Backlogs[0], rl.Backlogs[len(rl.Backlogs)-1]
	var out []Ratio
	for _, sink := range []string{"null", "kfake"} {
		ordered := fmt.Sprintf("relay-ordered-%d-keys-%s", rl.Keys, sink)
		x, y := get(ordered, large), get(ordered, small)
		if large > small && x != nil && y != nil && y.MsgsPerS > 0 {
			v := ratio(x, y)
			name := fmt.Sprintf("ordered relay, %d keys, to the %s sink: msgs/s at a backlog of %d ÷ at %d", rl.Keys, sink, large, small)
			if sink == "null" {
				out = append(out, Ratio{Name: name + " (≥ 0.8: cost linear in the backlog)", Value: round2(v), Want: 0.8, Met: v >= 0.8})
			} else {
				out = append(out, Ratio{Name: name + " (report only)", Value: round2(v), Met: true, ReportOnly: true})
			}
		}
		u := get("relay-unordered-"+sink, large)
		if x != nil && u != nil && u.MsgsPerS > 0 {
			v := ratio(x, u)
			name := fmt.Sprintf("ordered relay, %d keys ÷ unordered relay, to the %s sink: msgs/s at a backlog of %d", rl.Keys, sink, large)
			if sink == "null" {
				out = append(out, Ratio{Name: name + " (≥ 0.5)", Value: round2(v), Want: 0.5, Met: v >= 0.5})
			} else {
				out = append(out, Ratio{Name: name + " (report only)", Value: round2(v), Met: true, ReportOnly: true})
			}
		}
	}
	return out
}
