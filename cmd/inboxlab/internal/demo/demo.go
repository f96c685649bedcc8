// Package demo is 'inboxlab demo': the story of the handler that ran twice,
// replayed with the common fixes for duplicate deliveries side by side, on
// an embedded SQLite store and an in-process Kafka (kfake) unless it is
// given real ones. It tells the same story on NATS JetStream (a server
// embedded in the process, or one at a URL) and on RabbitMQ (the local
// server, or one at a URL).
//
// A producer emits OrderPlaced events, each with a stable event id in a
// header. Two of them are legitimate and have identical bodies (two
// one-dollar top-ups), and one is produced again at the end onto a new
// offset with the same id, as a relay does after a bug fix. Two consumers
// read them: billing credits an account and inventory reserves stock.
//
// Each consumer runs under each strategy, on a consumer group of its own,
// and goes through the same crashes, where at-least-once delivery hurts:
//
//   - after the side effect, before the commit;
//   - after the commit, before the offset commit;
//   - a rebalance in the middle of a batch, before the batch's offsets
//     are committed.
//
// The strategies:
//
//   - none: no dedup.
//   - offset-key: topic/partition/offset claimed in the same transaction.
//   - payload-hash: a hash of the body claimed in the same transaction.
//   - separate-store: the event id kept in a store beside the database
//     (an in-process set standing in for Redis), written after the commit.
//   - ack-before-commit: the event id claimed in the same transaction, but
//     the batch's offsets are committed before it is processed.
//   - inbox: the producer's event id claimed in the same transaction, by
//     the real adapter (inboxkafka, inboxnats, inboxrabbit) over the real
//     store, in consumer processes that are killed with SIGKILL at the
//     fault points.
//   - watermill-deduplicator: a Watermill handler behind Watermill's
//     Deduplicator middleware, keyed on the event id (watermill.go). At the
//     first window its handler fails and the process lives on.
//
// On NATS and RabbitMQ a crash closes the consumer's connection without
// acknowledging, and acknowledging is what committing offsets is on Kafka.
// The offset-key strategy keys on the broker's own number for a delivery:
// the stream sequence on NATS, the delivery tag on RabbitMQ (which numbers
// the deliveries of one channel, from 1 on each new one).
//
// Runs are deterministic for a seed: the events, the crash points and so
// every count, on Kafka and NATS alike (the same seed gives the same
// counts on both). On RabbitMQ the counts of the strategies are too, but
// not the inbox consumer's crashes: its mid-batch crash needs a batch of
// two or more, and inboxrabbit batches what has arrived, often one
// delivery. Only the inbox is clean.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os/exec"
	"slices"
	"time"

	"github.com/txinbox/inbox/internal/command"
	"github.com/txinbox/inbox/internal/uuid"
)

// Defaults of the Config fields.
const (
	DefaultEvents = 40
	DefaultSeed   = 1
)

// Config configures a run.
type Config struct {
	// Seed chooses the events and the crash points. Defaults to
	// DefaultSeed.
	Seed uint64
	// Events is the number of distinct events, at least 20. Defaults to
	// DefaultEvents.
	Events int
	// DatabaseURL is the store: postgres://… runs on Postgres, in a schema
	// of its own. Empty uses an SQLite file in a temporary directory.
	DatabaseURL string
	// Transport is the broker: TransportKafka, TransportNATS or
	// TransportRabbitMQ. Defaults to TransportKafka.
	Transport string
	// Brokers names a real Kafka cluster. Empty runs kfake in process.
	Brokers string
	// NATSURL names a NATS server with JetStream. Empty runs one in
	// process.
	NATSURL string
	// AMQPURL names a RabbitMQ server. Defaults to DefaultAMQPURL, the
	// local one.
	AMQPURL string
	// Command returns the command that runs one life of an inbox consumer
	// with args: the CLI runs its own binary with the hidden demo-consumer
	// command.
	Command func(args []string) *exec.Cmd
	// Log receives progress lines. Defaults to io.Discard.
	Log io.Writer
	// Producer adds the producer's side (see producer.go), on the same
	// broker: the outbox, whose relay dies after the broker confirmed,
	// against a producer that mints a new id when it retries. Defaults to
	// false; the CLI sets it unless --producer=false.
	Producer bool
}

// Result is the outcome of a run. Its JSON form is the contract of
// 'inboxlab demo --json'.
type Result struct {
	Events     int              `json:"events"`
	Crashes    int              `json:"crashes"`
	Store      string           `json:"store"`
	Transport  string           `json:"transport"`
	Strategies []StrategyResult `json:"strategies"`
	// Producer is the producer's side, with Config.Producer: the outbox
	// against a producer that mints a new id when it retries.
	Producer *ProducerResult `json:"producer,omitempty"`
}

// StrategyResult counts, over both consumers, what one strategy did wrong.
type StrategyResult struct {
	Name string `json:"name"`
	// DoubleApplied counts the extra applications of events that were
	// applied more than once.
	DoubleApplied int `json:"double_applied"`
	// Lost counts events a consumer never applied without deciding to
	// skip them: their offsets were committed anyway.
	Lost int `json:"lost"`
	// WronglySkipped counts events a consumer skipped as duplicates of
	// events it had not seen.
	WronglySkipped int `json:"wrongly_skipped"`
	// BalanceOK reports whether every balance and stock level equals what
	// the distinct events add up to.
	BalanceOK bool `json:"balance_ok"`

	// Cents and WantCents are the sum of the balances, in cents, as they
	// are and as the distinct events add up.
	Cents     int64 `json:"balance_cents"`
	WantCents int64 `json:"expected_balance_cents"`
}

// The strategies, in the order they are shown.
var Strategies = []string{"none", "offset-key", "payload-hash", "separate-store", "ack-before-commit", "inbox", StrategyWatermillDeduplicator}

// The consumers of every strategy.
var consumers = []string{"billing", "inventory"}

// event is one OrderPlaced event.
type event struct {
	ID      string
	Account string
	Cents   int64
	SKU     string
	Qty     int64
}

// body is the payload of an event. It holds no id: the id travels in the
// event-id header, so that two different events can have the same body.
func (e event) body() []byte {
	return fmt.Appendf(nil, `{"type":"OrderPlaced","account":%q,"amount_cents":%d,"sku":%q,"qty":%d}`, e.Account, e.Cents, e.SKU, e.Qty)
}

// window is a crash window: a point where at-least-once delivery hurts.
type window int

const (
	afterEffect window = iota // after the side effect, before the commit
	afterCommit               // after the commit, before the offset commit
	midBatch                  // a rebalance mid-batch, before the batch's offsets are committed
	numWindows
)

func (w window) String() string {
	return [...]string{"after-effect-before-commit", "after-commit-before-offset-commit", "rebalance-mid-batch"}[w]
}

// scenario is what a seed chooses.
type scenario struct {
	events []event
	// records is the produce order: every event, then the republished one.
	records []event
	// twins are the indexes of the two events with identical bodies.
	twins [2]int
	// republished is the index of the event produced again.
	republished int
	// crashAt[w] is the index of the record at which window w crashes.
	crashAt [numWindows]int
}

// batchSize is the number of records the hand-written consumers process
// before they commit offsets.
const batchSize = 5

func newScenario(seed uint64, n int) *scenario {
	r := rand.New(rand.NewPCG(seed, seed*0x9e3779b97f4a7c15+1))
	s := &scenario{}
	skus := []string{"mug", "tee", "cap", "poster"}
	for range n {
		s.events = append(s.events, event{
			ID:      uuidFrom(r),
			Account: fmt.Sprintf("acct-%d", 1+r.IntN(5)),
			Cents:   100 * (1 + r.Int64N(50)),
			SKU:     skus[r.IntN(len(skus))],
			Qty:     1 + r.Int64N(3),
		})
	}
	// Two one-dollar top-ups of the same account: same body, two events.
	s.twins = [2]int{2 + r.IntN(n/4), n/2 + r.IntN(n/4)}
	for _, i := range s.twins {
		s.events[i].Account, s.events[i].Cents, s.events[i].SKU, s.events[i].Qty = "acct-7", 100, "gift-card", 1
	}
	// One event republished at the end by a relay, same id, new offset.
	for {
		s.republished = r.IntN(n)
		if s.republished != s.twins[0] && s.republished != s.twins[1] {
			break
		}
	}
	s.records = append(append(s.records, s.events...), s.events[s.republished])
	// One crash per window, in distinct batches, none on the twins, and
	// not on the first record of a batch, so that each crash has processed
	// work behind it in its batch.
	used := map[int]bool{}
	for w := range numWindows {
		for {
			i := batchSize*(1+r.IntN(n/batchSize-1)) + 1 + r.IntN(batchSize-1)
			if i < n && !used[i/batchSize] && i != s.twins[0] && i != s.twins[1] && i != s.republished {
				used[i/batchSize] = true
				s.crashAt[w] = i
				break
			}
		}
	}
	return s
}

// uuidFrom draws a random UUID from r, so that ids repeat with the seed.
func uuidFrom(r *rand.Rand) string {
	var b [16]byte
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return uuid.Format(b)
}

// want returns what the distinct events add up to: cents per account and
// quantity per SKU.
func (s *scenario) want() (map[string]int64, map[string]int64) {
	cents, qty := map[string]int64{}, map[string]int64{}
	for _, e := range s.events {
		cents[e.Account] += e.Cents
		qty[e.SKU] += e.Qty
	}
	return cents, qty
}

// Run runs the demo.
func Run(ctx context.Context, config Config) (*Result, error) {
	cfg := config
	if cfg.Seed == 0 {
		cfg.Seed = DefaultSeed
	}
	if cfg.Events == 0 {
		cfg.Events = DefaultEvents
	}
	if cfg.Events < 20 || cfg.Events > 10_000 {
		return nil, fmt.Errorf("events %d: want 20 to 10,000", cfg.Events)
	}
	if cfg.Transport == "" {
		cfg.Transport = TransportKafka
	}
	if !slices.Contains(Transports, cfg.Transport) {
		return nil, fmt.Errorf("transport %q: want kafka, nats or rabbitmq", cfg.Transport)
	}
	if cfg.Command == nil {
		return nil, errors.New("Config.Command is nil")
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	start := time.Now()
	s := newScenario(cfg.Seed, cfg.Events)
	st, err := openStore(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	defer func() { command.Cleaned(ctx, "%s", st.close()) }()
	if err := st.setup(ctx); err != nil {
		return nil, err
	}
	b, t, err := openBroker(ctx, &cfg)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, s := range b.Cleanup() {
			command.Cleaned(ctx, "%s", s)
		}
	}()
	if err := produce(ctx, t, s.records); err != nil {
		return nil, err
	}
	fmt.Fprintf(cfg.Log, "demo: %d events (+1 republished) on %s, %s store, seed %d\n", len(s.events), b.Kind(), st.kind, cfg.Seed)

	res := &Result{Events: len(s.events), Store: st.kind, Transport: cfg.Transport}
	type outcome struct {
		crashes int
		err     error
	}
	runs := map[string]chan outcome{}
	for _, name := range Strategies {
		for _, consumer := range consumers {
			ch := make(chan outcome, 1)
			runs[name+"/"+consumer] = ch
			go func() {
				var crashes int
				var err error
				if name == "inbox" {
					crashes, err = runInbox(ctx, &cfg, st, t, s, consumer)
				} else if name == StrategyWatermillDeduplicator {
					crashes, err = runWatermillDedup(ctx, &cfg, st, t, s, consumer)
				} else {
					crashes, err = runNaive(ctx, &cfg, st, t, s, name, consumer)
				}
				ch <- outcome{crashes, err}
			}()
		}
	}
	// Every run ends before the store and the broker close, the first
	// error or not: each ends soon once ctx is done.
	var runErr error
	for key, ch := range runs {
		o := <-ch
		if o.err != nil && runErr == nil {
			runErr = fmt.Errorf("%s: %w", key, o.err)
		}
		res.Crashes += o.crashes
	}
	if runErr != nil {
		return nil, runErr
	}
	for _, name := range Strategies {
		sr, err := st.tally(ctx, s, name)
		if err != nil {
			return nil, err
		}
		res.Strategies = append(res.Strategies, *sr)
	}
	if cfg.Producer {
		if res.Producer, err = runProducer(ctx, st, b, t, s); err != nil {
			return nil, err
		}
	}
	fmt.Fprintf(cfg.Log, "demo: done in %v\n", time.Since(start).Round(time.Millisecond))
	return res, nil
}
