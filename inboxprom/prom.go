// Package inboxprom exports the inbox's and the outbox's metrics to
// Prometheus, registered with the caller's prometheus.Registerer (never the
// global one).
//
// An Observer counts what the client and the relays do, as they do it: set
// it in inbox.Config.Observer and outbox.RelayConfig.Observer. A
// StatsCollector reads the store on scrape (at most once per
// StatsConfig.Interval): rows, dedup coverage and retention headroom per
// consumer, stuck effects, and the outbox's pending, parked and lag.
//
// Every label comes from a bounded set: consumer names (which the client
// validates and the application configures), outcomes, reasons and
// faults. No message id, topic or error text is ever a label.
package inboxprom

import (
	"errors"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/outbox"
)

// DefaultBuckets are the latency histograms' buckets, in seconds.
var DefaultBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// Config configures an Observer.
type Config struct {
	// Registerer registers the metrics. Required: pass
	// prometheus.DefaultRegisterer to use the global registry.
	Registerer prometheus.Registerer
	// Buckets are the latency histograms' buckets. Defaults to
	// DefaultBuckets.
	Buckets []float64
	// ConstLabels are added to every metric, such as the service.
	ConstLabels prometheus.Labels
}

// Observer counts the inbox's transactions and dead letters, and the
// relay's claims, publishes and parked events. It is an inbox.Observer and
// an outbox.Observer, safe for concurrent use.
type Observer struct {
	messages     *prometheus.CounterVec
	duplicates   *prometheus.CounterVec
	claim        *prometheus.HistogramVec
	handler      *prometheus.HistogramVec
	commit       *prometheus.HistogramVec
	failures     *prometheus.CounterVec
	conflicts    *prometheus.CounterVec
	lockTimeouts *prometheus.CounterVec
	deadLettered *prometheus.CounterVec

	relayClaim prometheus.Histogram
	published  *prometheus.CounterVec
	publish    prometheus.Histogram
	lag        prometheus.Histogram
	parked     prometheus.Counter

	consumers sync.Map // consumer → *consumerMetrics
}

// consumerMetrics are one consumer's children of the vectors, looked up
// once.
type consumerMetrics struct {
	applied, duplicate, failed        prometheus.Counter
	redelivery, republish, concurrent prometheus.Counter
	claim, handler, commit            prometheus.Observer
	conflicts, lockTimeouts           prometheus.Counter
}

var (
	_ inbox.Observer  = (*Observer)(nil)
	_ outbox.Observer = (*Observer)(nil)
)

// New returns an Observer whose metrics are registered with
// config.Registerer.
func New(config Config) (*Observer, error) {
	if config.Registerer == nil {
		return nil, errors.New("inboxprom: Config.Registerer is nil: pass the registry to register with")
	}
	buckets := config.Buckets
	if buckets == nil {
		buckets = DefaultBuckets
	}
	cl := config.ConstLabels
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: cl}, labels)
	}
	hist := func(name, help string, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets, ConstLabels: cl}, labels)
	}
	o := &Observer{
		messages:     counter("inbox_messages_total", "Messages processed, by outcome: applied, duplicate, failed (in a transaction that failed), dead_lettered.", "consumer", "outcome"),
		duplicates:   counter("inbox_duplicates_total", "Duplicates skipped, by reason: redelivery (the broker delivered again: an ack was lost), republish (a first delivery of an applied id: the producer sent it again), concurrent (another copy was in flight).", "consumer", "reason"),
		claim:        hist("inbox_claim_seconds", "Time to begin a transaction and claim its messages.", "consumer"),
		handler:      hist("inbox_handler_seconds", "Time spent in handlers per transaction.", "consumer"),
		commit:       hist("inbox_commit_seconds", "Time to commit a transaction.", "consumer"),
		failures:     counter("inbox_tx_failures_total", "Transactions that failed, by fault (inbox.Judge): message, permanent, store, systemic, contention.", "consumer", "fault"),
		conflicts:    counter("inbox_tx_conflicts_total", "Transactions that failed on a serialization failure or deadlock (retried).", "consumer"),
		lockTimeouts: counter("inbox_lock_timeouts_total", "Claims that waited longer than Config.LockTimeout for a lock.", "consumer"),
		deadLettered: counter("inbox_dead_lettered_total", "Messages stored as dead letters, by reason.", "consumer", "reason"),
		relayClaim:   prometheus.NewHistogram(prometheus.HistogramOpts{Name: "outbox_claim_seconds", Help: "Time for a relay's claim.", Buckets: buckets, ConstLabels: cl}),
		published:    counter("outbox_published_total", "Events offered to the broker, by result: ok, rejected, unavailable.", "result"),
		publish:      prometheus.NewHistogram(prometheus.HistogramOpts{Name: "outbox_publish_seconds", Help: "Time to publish one claimed batch.", Buckets: buckets, ConstLabels: cl}),
		lag:          prometheus.NewHistogram(prometheus.HistogramOpts{Name: "outbox_publish_lag_seconds", Help: "Age at its claim of the oldest event of each published batch.", Buckets: []float64{0.01, 0.1, 1, 10, 60, 600, 3600, 86400}, ConstLabels: cl}),
		parked:       prometheus.NewCounter(prometheus.CounterOpts{Name: "outbox_parked_total", Help: "Events parked for an operator after their rejections.", ConstLabels: cl}),
	}
	for _, c := range []prometheus.Collector{o.messages, o.duplicates, o.claim, o.handler, o.commit, o.failures, o.conflicts,
		o.lockTimeouts, o.deadLettered, o.relayClaim, o.published, o.publish, o.lag, o.parked} {
		if err := config.Registerer.Register(c); err != nil {
			return nil, fmt.Errorf("inboxprom: register: %w", err)
		}
	}
	return o, nil
}

// of returns consumer's metrics.
func (o *Observer) of(consumer string) *consumerMetrics {
	if m, ok := o.consumers.Load(consumer); ok {
		return m.(*consumerMetrics)
	}
	m := &consumerMetrics{
		applied:      o.messages.WithLabelValues(consumer, "applied"),
		duplicate:    o.messages.WithLabelValues(consumer, "duplicate"),
		failed:       o.messages.WithLabelValues(consumer, "failed"),
		redelivery:   o.duplicates.WithLabelValues(consumer, inbox.DuplicateRedelivery.String()),
		republish:    o.duplicates.WithLabelValues(consumer, inbox.DuplicateRepublish.String()),
		concurrent:   o.duplicates.WithLabelValues(consumer, inbox.DuplicateConcurrent.String()),
		claim:        o.claim.WithLabelValues(consumer),
		handler:      o.handler.WithLabelValues(consumer),
		commit:       o.commit.WithLabelValues(consumer),
		conflicts:    o.conflicts.WithLabelValues(consumer),
		lockTimeouts: o.lockTimeouts.WithLabelValues(consumer),
	}
	v, _ := o.consumers.LoadOrStore(consumer, m)
	return v.(*consumerMetrics)
}
