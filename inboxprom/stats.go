package inboxprom

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxtype"
)

// StatsSource is what a StatsCollector reads: an *inbox.Admin
// (Client.Admin).
type StatsSource interface {
	Stats(ctx context.Context) (*inboxtype.Stats, error)
	// OutboxStats returns inbox.ErrNoOutbox when the store keeps none:
	// the outbox's gauges are left out.
	OutboxStats(ctx context.Context) (*inboxtype.OutboxStats, error)
	// EffectList returns an error wrapping inbox.ErrEffectsUnsupported
	// when the store keeps no effects ledger: inbox_effects_stuck is left
	// out.
	EffectList(ctx context.Context, p inboxtype.EffectListParams) ([]*inboxtype.EffectEntry, error)
	Config() inbox.Config
}

// Defaults of StatsConfig.
const (
	DefaultStatsInterval = time.Minute
	DefaultStatsTimeout  = 10 * time.Second
	DefaultStuckAfter    = 15 * time.Minute
	// MaxStuckEffects bounds the count of stuck effects a read makes: the
	// gauge says "at least" this many.
	MaxStuckEffects = 1000
)

// StatsConfig configures a StatsCollector.
type StatsConfig struct {
	// Registerer registers the collector. Required.
	Registerer prometheus.Registerer
	// Interval is how long a read of the store serves scrapes: Stats
	// counts every row, so scrapes more frequent than this reuse the last
	// read. Negative reads on every scrape. Defaults to
	// DefaultStatsInterval (1m).
	Interval time.Duration
	// Timeout bounds a read of the store. Defaults to
	// DefaultStatsTimeout (10s).
	Timeout time.Duration
	// ReplayHorizon is the window inbox_retention_headroom_seconds is
	// measured against. Defaults to the client's Config.ReplayHorizon.
	ReplayHorizon time.Duration
	// StuckAfter is how long an effect may stay started before it counts
	// as stuck. Defaults to DefaultStuckAfter (15m).
	StuckAfter time.Duration
	// ConstLabels are added to every metric.
	ConstLabels prometheus.Labels
}

// StatsCollector reports the store's state on scrape. Register it with
// NewStatsCollector.
type StatsCollector struct {
	src StatsSource
	cfg StatsConfig
	now func() time.Time

	rows, coverage, headroom, horizon, tableBytes, stuck *prometheus.Desc
	pending, parked, published, oldest                   *prometheus.Desc
	up, duration                                         *prometheus.Desc

	mu      sync.Mutex
	read    time.Time // when last was read
	last    []prometheus.Metric
	lastErr error
}

// NewStatsCollector returns a collector of src's stats, registered with
// config.Registerer.
func NewStatsCollector(src StatsSource, config StatsConfig) (*StatsCollector, error) {
	if src == nil {
		return nil, errors.New("inboxprom: NewStatsCollector: source is nil")
	}
	if config.Registerer == nil {
		return nil, errors.New("inboxprom: StatsConfig.Registerer is nil: pass the registry to register with")
	}
	switch {
	case config.Timeout < 0:
		return nil, fmt.Errorf("inboxprom: StatsConfig.Timeout must not be negative, got %v", config.Timeout)
	case config.ReplayHorizon < 0:
		return nil, fmt.Errorf("inboxprom: StatsConfig.ReplayHorizon must not be negative, got %v", config.ReplayHorizon)
	case config.StuckAfter < 0:
		return nil, fmt.Errorf("inboxprom: StatsConfig.StuckAfter must not be negative, got %v", config.StuckAfter)
	}
	cc := src.Config()
	if config.Interval == 0 {
		config.Interval = DefaultStatsInterval
	}
	if config.Timeout == 0 {
		config.Timeout = DefaultStatsTimeout
	}
	if config.ReplayHorizon == 0 {
		config.ReplayHorizon = cc.ReplayHorizon
	}
	if config.StuckAfter == 0 {
		config.StuckAfter = DefaultStuckAfter
	}
	now := cc.Now
	if now == nil {
		now = time.Now
	}
	cl := config.ConstLabels
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, cl)
	}
	c := &StatsCollector{
		src: src, cfg: config, now: now,
		rows:       d("inbox_rows", "Inbox rows (applied message ids kept for deduplication).", "consumer"),
		coverage:   d("inbox_dedup_coverage_seconds", "How far back the inbox still deduplicates: now minus the oldest retained row.", "consumer"),
		headroom:   d("inbox_retention_headroom_seconds", "Dedup coverage minus the replay horizon. Negative: a replay from as far back as the horizon would apply messages again.", "consumer"),
		horizon:    d("inbox_replay_horizon_seconds", "The replay horizon the headroom is measured against."),
		tableBytes: d("inbox_table_bytes", "Size of the inbox table with its indexes."),
		stuck:      d("inbox_effects_stuck", fmt.Sprintf("Effects started and not recorded done or failed for longer than %v (counted up to %d).", config.StuckAfter, MaxStuckEffects), "consumer"),
		pending:    d("outbox_pending", "Outbox events not yet published and not parked."),
		parked:     d("outbox_parked", "Outbox events parked for an operator."),
		published:  d("outbox_published_kept", "Published outbox events kept (RelayConfig.KeepPublished)."),
		oldest:     d("outbox_oldest_pending_age_seconds", "Age of the oldest pending outbox event: the relays' lag."),
		up:         d("inbox_stats_up", "1 if the last read of the store's stats succeeded, 0 if it failed."),
		duration:   d("inbox_stats_read_seconds", "Time the last read of the store's stats took."),
	}
	if err := config.Registerer.Register(c); err != nil {
		return nil, fmt.Errorf("inboxprom: register: %w", err)
	}
	return c, nil
}

// Describe describes the collector's metrics.
func (c *StatsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.rows, c.coverage, c.headroom, c.horizon, c.tableBytes, c.stuck,
		c.pending, c.parked, c.published, c.oldest, c.up, c.duration} {
		ch <- d
	}
}

// Collect reads the store, unless it was read within the interval, and
// sends the metrics. A failed read sends inbox_stats_up 0 and nothing else.
func (c *StatsCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.read.IsZero() || c.cfg.Interval < 0 || time.Since(c.read) >= c.cfg.Interval {
		c.last, c.lastErr = c.collect()
		c.read = time.Now()
	}
	up := 1.0
	if c.lastErr != nil {
		up = 0
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, up)
	for _, m := range c.last {
		ch <- m
	}
}

// Err returns the error of the last read of the store, or nil.
func (c *StatsCollector) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastErr
}

// collect reads the store once.
func (c *StatsCollector) collect() ([]prometheus.Metric, error) {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Timeout)
	defer cancel()
	start := time.Now()
	var out []prometheus.Metric
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		out = append(out, prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...))
	}
	s, err := c.src.Stats(ctx)
	if err != nil {
		return nil, err
	}
	now := c.now()
	gauge(c.horizon, c.cfg.ReplayHorizon.Seconds())
	if s.TableBytes >= 0 {
		gauge(c.tableBytes, float64(s.TableBytes))
	}
	for _, cs := range s.Consumers {
		gauge(c.rows, float64(cs.Rows), cs.Consumer)
		if cs.Rows > 0 && !cs.Oldest.IsZero() {
			cov := max(now.Sub(cs.Oldest), 0)
			gauge(c.coverage, cov.Seconds(), cs.Consumer)
			gauge(c.headroom, (cov - c.cfg.ReplayHorizon).Seconds(), cs.Consumer)
		}
	}
	effects, err := c.src.EffectList(ctx, inboxtype.EffectListParams{State: inboxtype.EffectStarted, StartedBefore: now.Add(-c.cfg.StuckAfter), Limit: MaxStuckEffects})
	switch {
	case errors.Is(err, inbox.ErrEffectsUnsupported):
	case err != nil:
		return nil, err
	default:
		stuck := map[string]int{}
		for _, cs := range s.Consumers {
			stuck[cs.Consumer] = 0
		}
		for _, e := range effects {
			stuck[e.Consumer]++
		}
		for consumer, n := range stuck {
			gauge(c.stuck, float64(n), consumer)
		}
	}
	os, err := c.src.OutboxStats(ctx)
	switch {
	case errors.Is(err, inbox.ErrNoOutbox):
	case err != nil:
		return nil, err
	default:
		gauge(c.pending, float64(os.Pending))
		gauge(c.parked, float64(os.Parked))
		gauge(c.published, float64(os.Published))
		gauge(c.oldest, os.Lag.Seconds())
	}
	gauge(c.duration, time.Since(start).Seconds())
	return out, nil
}
