package bench

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"
)

// run is one measurement: a row at a worker count for a while.
type run struct {
	msgs, ops int64
	// elapsed is the wall time from the start until the last worker
	// stopped.
	elapsed time.Duration
	// msgsPerS is the sum of the workers' rates, each its messages over the
	// time from the start to the end of its last op. Summing rates keeps
	// the tail, where early finishers idle while a long op (a batch of a
	// thousand) completes, out of the figure.
	msgsPerS float64
	lat      []time.Duration
}

func (r run) rate() float64 { return r.msgsPerS }

// join is the baseline of two runs, one before and one after what is
// measured against it: the rate of the two weighted by their lengths, and
// the latencies of both. A baseline on both sides of the measured stretch
// does not lean on the way the machine drifts.
func join(before, after run) run {
	r := run{
		msgs:    before.msgs + after.msgs,
		ops:     before.ops + after.ops,
		elapsed: before.elapsed + after.elapsed,
		lat:     append(append([]time.Duration(nil), before.lat...), after.lat...),
	}
	if r.elapsed > 0 {
		r.msgsPerS = (before.msgsPerS*before.elapsed.Seconds() + after.msgsPerS*after.elapsed.Seconds()) / r.elapsed.Seconds()
	}
	return r
}

// drive runs r's op on n workers until stop is closed, and returns what
// they did. The first failing op stops every worker and is the error.
func (b *bench) drive(ctx context.Context, r *row, n int, ids idKind, stop <-chan struct{}) (run, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		firstEr error
		out     run
	)
	start := time.Now()
	for i := range n {
		w := b.workers[i]
		w.part, w.parts, w.batch, w.ids = i, n, r.batch, ids
		w.lat = w.lat[:0]
		w.pending, w.first = nil, false
		wg.Add(1)
		go func() {
			defer wg.Done()
			var ops int64
			for {
				// A broker row's first op only sends (worker.pipeline):
				// it runs a second, which completes a batch, however
				// short the round.
				stopped := stop
				if w.first && ops < 2 {
					stopped = nil
				}
				select {
				case <-stopped:
				case <-ctx.Done():
				default:
					t0 := time.Now()
					if err := r.op(ctx, b, w); err != nil {
						mu.Lock()
						if firstEr == nil {
							firstEr = fmt.Errorf("row %s at %d workers: %w", r.name, n, err)
						}
						mu.Unlock()
						cancel()
						return
					}
					w.lat = append(w.lat, time.Since(t0))
					ops++
					continue
				}
				busy := time.Since(start)
				lat := w.lat
				if w.first && ops > 0 {
					// A broker row's first op only sent a batch.
					ops--
					lat = lat[1:]
				}
				if w.pending != nil {
					err := w.pending(ctx)
					w.pending = nil
					if err != nil {
						mu.Lock()
						if firstEr == nil {
							firstEr = fmt.Errorf("row %s at %d workers: %w", r.name, n, err)
						}
						mu.Unlock()
						cancel()
						return
					}
				}
				mu.Lock()
				out.ops += ops
				out.msgsPerS += float64(ops*int64(r.batch)) / busy.Seconds()
				out.lat = append(out.lat, lat...)
				mu.Unlock()
				return
			}
		}()
	}
	wg.Wait()
	out.elapsed = time.Since(start)
	out.msgs = out.ops * int64(r.batch)
	if firstEr != nil {
		return run{}, firstEr
	}
	if err := ctx.Err(); err != nil {
		return run{}, err
	}
	return out, nil
}

// timed runs r for d.
func (b *bench) timed(ctx context.Context, r *row, n int, ids idKind, d time.Duration) (run, error) {
	stop := make(chan struct{})
	t := time.AfterFunc(d, func() { close(stop) })
	defer t.Stop()
	return b.drive(ctx, r, n, ids, stop)
}

// measured runs r for d, and reads the WAL it wrote and the CPU it took.
func (b *bench) measured(ctx context.Context, r *row, n int, ids idKind, d time.Duration) (run, usage, error) {
	m0, err := b.mark(ctx)
	if err != nil {
		return run{}, usage{}, err
	}
	res, err := b.timed(ctx, r, n, ids, d)
	if err != nil {
		return run{}, usage{}, err
	}
	m1, err := b.mark(ctx)
	if err != nil {
		return run{}, usage{}, err
	}
	return res, since(m0, m1), nil
}

// cell is a row at one worker count, and what its rounds measured.
type cell struct {
	row     *row
	workers int
	rates   []float64
	wal     []float64 // WAL bytes per message, per round
	lat     []time.Duration
	msgs    int64
	ops     int64
	// server and client are the CPU time the rounds took; serverOK is false
	// when the server's could not be read.
	server, client time.Duration
	serverOK       bool
	// txs, txMsgs and txTime are a timed row's transactions that
	// committed, their messages, and the time they took.
	txs    int64
	txMsgs int64
	txTime time.Duration
}

func (c *cell) add(r run, u usage) {
	c.rates = append(c.rates, r.rate())
	c.lat = append(c.lat, r.lat...)
	c.msgs += r.msgs
	c.ops += r.ops
	if r.msgs > 0 {
		c.wal = append(c.wal, float64(u.wal)/float64(r.msgs))
	}
	c.serverOK = u.serverOK && (c.serverOK || len(c.rates) == 1)
	c.server += u.server
	c.client += u.client
	c.txs += u.txs
	c.txMsgs += u.txMsgs
	c.txTime += u.txTime
}

// usPerMsg returns d (CPU or transaction time) over msgs messages, in
// microseconds.
func usPerMsg(d time.Duration, msgs int64) *float64 {
	if msgs == 0 {
		return nil
	}
	return ptr(round1(float64(d.Microseconds()) / float64(msgs)))
}

// runRows runs the rows in phases: first those that need no background
// resource, then, for each set of background resources, the rows that need
// them, with only those open. In each phase it warms every cell up, then
// runs the rounds, each in a new order.
func (b *bench) runRows(ctx context.Context, rng *rand.Rand) ([]Result, error) {
	var cells []*cell
	for _, ph := range phases(b.rows) {
		closeFn, err := b.openPhase(ctx, ph.background)
		if err != nil {
			return nil, err
		}
		var phase []*cell
		for _, r := range ph.rows {
			if !slices.Contains(b.rows, r) {
				continue // left out: a resource of its phase failed
			}
			for _, n := range b.cfg.Workers {
				phase = append(phase, &cell{row: r, workers: n})
			}
		}
		if len(ph.background) > 0 && len(phase) > 0 {
			b.logf("the rows that need %s, with only that open", resourceNames(ph.background))
		}
		err = b.runPhase(ctx, rng, ph.background, phase)
		closeFn()
		if err != nil {
			return nil, err
		}
		cells = append(cells, phase...)
	}
	// The results in table order.
	slices.SortStableFunc(cells, func(x, y *cell) int {
		return cmp.Compare(slices.Index(b.rows, x.row), slices.Index(b.rows, y.row))
	})
	inboxBytes, err := b.bytesPerRow(ctx, b.pg.inboxTable)
	if err != nil {
		return nil, err
	}
	results := make([]Result, 0, len(cells))
	for _, c := range cells {
		res := Result{
			Name:     c.row.name,
			Workers:  c.workers,
			MsgsPerS: round1(median(c.rates)),
			P50Ms:    ms(percentile(c.lat, 0.50)),
			P99Ms:    ms(percentile(c.lat, 0.99)),
			Batch:    c.row.batch,
			Msgs:     c.msgs,
			Ops:      c.ops,
			Rounds:   len(c.rates),
			MinRate:  round1(slices.Min(c.rates)),
			MaxRate:  round1(slices.Max(c.rates)),
		}
		for _, x := range c.rates {
			res.RoundRates = append(res.RoundRates, round1(x))
		}
		if c.row.postgres && len(c.wal) > 0 {
			res.WALBytesPerMsg = ptr(round1(max(slices.Min(c.wal), 0)))
		}
		if c.row.inbox {
			res.InboxBytesPerRow = ptr(inboxBytes)
		}
		if c.row.postgres && c.serverOK {
			res.ServerCPUUsPerMsg = usPerMsg(c.server, c.msgs)
		}
		res.ClientCPUUsPerMsg = usPerMsg(c.client, c.msgs)
		if c.row.timed {
			res.TxUsPerMsg = usPerMsg(c.txTime, c.txMsgs)
			if c.txs > 0 {
				res.TxMsgsPerTx = ptr(round1(float64(c.txMsgs) / float64(c.txs)))
			}
		}
		results = append(results, res)
	}
	return results, nil
}

// runPhase warms cells up, then runs the rounds over them, with the
// phase's background resources that a cell's row does not need quiet.
func (b *bench) runPhase(ctx context.Context, rng *rand.Rand, background []*resource, cells []*cell) error {
	if len(cells) == 0 {
		return nil
	}
	if b.cfg.Warmup > 0 {
		b.logf("warm-up: %d cells (rows × worker counts), %v each", len(cells), b.cfg.Warmup)
		for _, c := range cells {
			quietFor(b, background, c.row)
			if _, err := b.timed(ctx, c.row, c.workers, idV7, b.cfg.Warmup); err != nil {
				return err
			}
		}
	}
	units := groupCells(cells)
	for round := range b.cfg.Rounds {
		b.logf("round %d of %d", round+1, b.cfg.Rounds)
		for _, i := range rng.Perm(len(units)) {
			for _, j := range rng.Perm(len(units[i])) {
				c := units[i][j]
				quietFor(b, background, c.row)
				r, u, err := b.measured(ctx, c.row, c.workers, idV7, b.cfg.Duration)
				if err != nil {
					return err
				}
				c.add(r, u)
			}
		}
	}
	return nil
}

// quietFor quiets the background resources that r does not need, and
// wakes those it does.
func quietFor(b *bench, background []*resource, r *row) {
	for _, res := range background {
		if res.quiet != nil {
			res.quiet(b, !slices.Contains(r.needs, res))
		}
	}
}

// phase is rows that run together, with their background resources open.
type phase struct {
	background []*resource
	rows       []*row
}

// phases splits rows by the background resources they need, with a ratio
// group's rows (ratioGroups) together in one phase, which opens what any
// of them needs. The phase of the rows that need none comes first.
func phases(rows []*row) []phase {
	bg := func(r *row) []*resource {
		var out []*resource
		for _, res := range r.needs {
			if res.background {
				out = append(out, res)
			}
		}
		return out
	}
	var out []phase
	at := map[string]int{"": 0}
	out = append(out, phase{})
	for _, r := range rows {
		need := bg(r)
		for _, g := range ratioGroups {
			if !slices.Contains(g, r.name) {
				continue
			}
			for _, other := range rows {
				if slices.Contains(g, other.name) {
					for _, res := range bg(other) {
						if !slices.Contains(need, res) {
							need = append(need, res)
						}
					}
				}
			}
		}
		slices.SortFunc(need, func(x, y *resource) int { return cmp.Compare(x.name, y.name) })
		key := resourceNames(need)
		i, ok := at[key]
		if !ok {
			i = len(out)
			at[key] = i
			out = append(out, phase{background: need})
		}
		out[i].rows = append(out[i].rows, r)
	}
	return out
}

func resourceNames(rs []*resource) string {
	names := make([]string, len(rs))
	for i, r := range rs {
		names[i] = r.name
	}
	return strings.Join(names, ", ")
}

// openPhase opens a phase's background resources, and returns the function
// that closes them. One that cannot be reached leaves out the rows that
// need it, as openAll does.
func (b *bench) openPhase(ctx context.Context, rs []*resource) (func(), error) {
	var closers []func()
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	failed := map[*resource]error{}
	for _, res := range rs {
		b.logf("open %s", res.name)
		closeFn, err := res.open(ctx, b)
		if err != nil {
			if !isUnavailable(err) {
				closeAll()
				return nil, fmt.Errorf("%s: %w", res.name, err)
			}
			failed[res] = err
			continue
		}
		if closeFn != nil {
			closers = append(closers, closeFn)
		}
	}
	b.leaveOut(failed)
	return closeAll, nil
}

// groupCells splits cells into the units a round runs in one piece: the
// cells of a ratio group (ratioGroups) at the same worker count, and every
// other cell alone.
func groupCells(cells []*cell) [][]*cell {
	group := func(name string) int {
		for i, g := range ratioGroups {
			if slices.Contains(g, name) {
				return i
			}
		}
		return -1
	}
	type key struct{ group, workers int }
	at := map[key]int{}
	var units [][]*cell
	for _, c := range cells {
		g := group(c.row.name)
		if g < 0 {
			units = append(units, []*cell{c})
			continue
		}
		k := key{g, c.workers}
		if i, ok := at[k]; ok {
			units[i] = append(units[i], c)
			continue
		}
		at[k] = len(units)
		units = append(units, []*cell{c})
	}
	return units
}

// bytesPerRow is the size of a table with its indexes over its row count.
func (b *bench) bytesPerRow(ctx context.Context, table string) (float64, error) {
	var size, n int64
	err := b.admin.QueryRow(ctx, `SELECT pg_total_relation_size($1::regclass), (SELECT count(*) FROM `+table+`)`, table).Scan(&size, &n)
	if err != nil {
		return 0, fmt.Errorf("size of %s: %w", table, err)
	}
	if n == 0 {
		return 0, nil
	}
	return round1(float64(size) / float64(n)), nil
}

// percentile returns the nearest-rank q-quantile of lat, sorting it.
func percentile(lat []time.Duration, q float64) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	slices.Sort(lat)
	i := int(math.Ceil(q*float64(len(lat)))) - 1
	return lat[max(i, 0)]
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func ms(d time.Duration) float64 {
	return math.Round(float64(d)/float64(time.Millisecond)*1000) / 1000
}

func round1(x float64) float64 { return math.Round(x*10) / 10 }

func ptr[T any](x T) *T { return &x }
