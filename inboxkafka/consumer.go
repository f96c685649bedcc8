package inboxkafka

import (
	"context"
	"errors"
	"log/slog"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxtransport"
)

// ErrClosed is returned by Run when the client was closed while the
// consumer ran. It is inboxtransport.ErrClosed, which every transport's Run
// returns for a closed client.
var ErrClosed = inboxtransport.ErrClosed

// Consumer runs poll → process → commit over a kgo client and an inbox
// client. Make it with New and run it with Run.
type Consumer[TTx any] struct {
	cl      *kgo.Client
	client  *inbox.Client[TTx]
	handler inbox.Handler[TTx]
	cfg     Config
	logger  *slog.Logger
	bind    *binding
	// loop is the delivery loop every transport runs: its Handle keys,
	// processes, judges and dead-letters each batch of a partition and
	// settles it through the partition's source, and counts the records'
	// attempts; its breaker keeps the consumer's outage and streak. The
	// partitions' workers and rebalances are this package's.
	loop *inboxtransport.Loop[TTx, *record]
	// ledger is the takeover ledger (see takeover.go).
	ledger *inboxtransport.Ledger

	// suspectMu runs the records that partitions run one at a time after
	// a crash one at a time across the consumer too (see takeover.go).
	suspectMu sync.Mutex

	// rebalanceMu serialises revokes, losses and Run's shutdown, which
	// each stop partitions and commit for them.
	rebalanceMu sync.Mutex
	// commitMu serialises the offset commits with the removal of the
	// partitions they are for, so that no commit for a partition is in
	// flight once a revoke has returned.
	commitMu sync.Mutex

	// mu guards parts, gen and stopped.
	mu    sync.Mutex
	parts map[topicPartition]*partition
	// gen counts assignments: each partition worker gets the next
	// value, and a mark from a worker whose generation is no longer the
	// partition's is dropped.
	gen     uint64
	stopped bool

	// workCtx is the parent of the workers' contexts: Run's context
	// without its cancellation, so that fault hooks and values reach the
	// client while a cancelled Run still lets in-flight batches finish.
	workCtx   context.Context
	commitKey chan struct{}
	wg        sync.WaitGroup
}

type topicPartition struct {
	topic     string
	partition int32
}

// New returns a consumer that processes the records that cl consumes with
// h, through client, exactly once per event id for config.Consumer.
//
// cl must be built with ClientOpts and a kgo.ConsumerGroup. New refuses a
// client that could commit an offset behind the consumer's back, with an
// error that names the option: auto-commit must be off (or limited to
// kgo.AutoCommitMarks), kgo.BlockRebalanceOnPoll must be on, and the revoke
// and lost callbacks must be those of ClientOpts.
//
// The caller keeps ownership of cl: close it after Run returns, with
// cl.Close or cl.CloseAllowingRebalance.
func New[TTx any](cl *kgo.Client, client *inbox.Client[TTx], h inbox.Handler[TTx], config *Config) (*Consumer[TTx], error) {
	if cl == nil {
		return nil, errors.New("inboxkafka: New: the kgo client is nil")
	}
	cfg := config.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	b, err := checkClient(cl, cfg.DeadLetterTopic)
	if err != nil {
		return nil, err
	}
	c := &Consumer[TTx]{cl: cl, client: client, handler: h, cfg: cfg, bind: b,
		parts: make(map[topicPartition]*partition), commitKey: make(chan struct{}, 1)}
	settings := cfg.Settings
	settings.Workers = 1 // unused: each partition has a worker
	// The takeover ledger bounds crashes per partition (takeover.go):
	// Kafka flags no redelivery for the loop to suspect.
	settings.MaxCrashes = -1
	c.loop, err = inboxtransport.NewLoop(inboxtransport.LoopConfig[TTx, *record]{
		Name: "inboxkafka", Client: client, Handler: h,
		Consumer: cfg.Consumer, Key: cfg.Key, Settings: settings,
		// A partition is processed in offset order, and a record that
		// failed is tried again in place: its partition holds its place.
		Ordered: true, RetryInPlace: true,
		DeadLetter: c.deadLetter,
		// A revoked partition's records go to the next owner.
		AbandonOnCancel: true,
	})
	if err != nil {
		return nil, err
	}
	c.logger = c.loop.Logger()
	if c.ledger, err = inboxtransport.NewLedger(client, cfg.Consumer); err != nil {
		return nil, err
	}
	if err := b.attach(c); err != nil {
		return nil, err
	}
	return c, nil
}

// Breaker returns the consumer's Breaker, whose State shows a store
// outage or an open streak breaker.
func (c *Consumer[TTx]) Breaker() *inboxtransport.Breaker { return c.loop.Breaker() }

// Config returns the consumer's configuration with defaults applied.
func (c *Consumer[TTx]) Config() Config { return c.cfg }

// Run polls records and processes them until ctx is done, then shuts down
// gracefully and returns nil. A Consumer runs once: a second Run returns
// inboxtransport.ErrRunTwice (the client's fetch position is past the
// records it polled and did not process).
//
// The handler's context carries ctx's values but not its cancellation: a
// transaction in flight when ctx is cancelled is allowed to finish, and its
// context is cancelled only when it is abandoned after
// Config.ShutdownTimeout.
//
// Each assigned partition has its own worker, so partitions are processed
// in parallel and each one in offset order, in batches of up to
// Config.MaxBatch records through inbox.Client.ProcessBatchOrdered. An
// offset is committed only after the transaction of its record (and of
// every record before it in its partition) has committed, or the record was
// dead-lettered.
//
// On return, the workers have finished their transactions in flight (or
// abandoned them after Config.ShutdownTimeout, and they rolled back), the
// offsets of what the database committed have been committed, and
// rebalances are allowed, so that the client can be closed. Run returns
// ErrClosed if the client was closed under it.
func (c *Consumer[TTx]) Run(ctx context.Context) error {
	return c.loop.RunFunc(ctx, nil, func(ctx, work context.Context, stop func(error)) {
		c.mu.Lock()
		c.workCtx = work
		c.mu.Unlock()

		commitCtx, stopCommitter := context.WithCancel(context.WithoutCancel(work))
		committerDone := make(chan struct{})
		go func() {
			defer close(committerDone)
			c.commitLoop(commitCtx)
		}()

		if err := c.poll(ctx); err != nil {
			stop(err)
		}

		c.shutdown()
		stopCommitter()
		<-committerDone
		c.wg.Wait()
		c.cl.AllowRebalance()
	})
}

// poll hands the polled records to their partitions' workers until ctx is
// done or the client is closed.
func (c *Consumer[TTx]) poll(ctx context.Context) error {
	for {
		fetches := c.cl.PollRecords(ctx, c.cfg.MaxPollRecords)
		if ctx.Err() != nil {
			return nil
		}
		if fetches.IsClientClosed() {
			return ErrClosed
		}
		fetches.EachError(func(topic string, partition int32, err error) {
			c.logger.WarnContext(ctx, "inboxkafka: fetch error", "topic", topic, "partition", partition, "err", err)
		})
		fetches.EachPartition(func(p kgo.FetchTopicPartition) {
			if len(p.Records) > 0 {
				c.dispatch(p.Topic, p.Partition, p.Records)
			}
		})
		c.cl.AllowRebalance()
	}
}

// dispatch queues records for their partition's worker, starting one for a
// partition newly assigned.
func (c *Consumer[TTx]) dispatch(topic string, partition int32, recs []*kgo.Record) {
	k := topicPartition{topic, partition}
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return
	}
	p := c.parts[k]
	if p == nil {
		c.gen++
		p = newPartition(c.workCtx, k, c.gen)
		c.parts[k] = p
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			c.work(p)
		}()
		c.logger.Debug("inboxkafka: partition worker started", "topic", topic, "partition", partition, "generation", p.gen)
	}
	c.mu.Unlock()
	p.enqueue(recs, c.cfg.MaxBuffered, func() {
		c.cl.PauseFetchPartitions(map[string][]int32{topic: {partition}})
	})
}

// mark records that every record of p up to rec is done: applied, found to
// be a duplicate, or dead-lettered. A mark from a worker whose assignment
// has ended is fenced off by its generation.
func (c *Consumer[TTx]) mark(p *partition, rec *kgo.Record) {
	c.mu.Lock()
	cur := c.parts[p.tp]
	if cur == nil || cur.gen != p.gen {
		c.mu.Unlock()
		c.logger.Debug("inboxkafka: dropped a mark from an earlier assignment", "topic", p.tp.topic, "partition", p.tp.partition,
			"generation", p.gen, "offset", rec.Offset)
		return
	}
	if rec.Offset+1 > p.next.Offset {
		p.next = kgo.EpochOffset{Epoch: rec.LeaderEpoch, Offset: rec.Offset + 1}
	}
	c.mu.Unlock()
	select {
	case c.commitKey <- struct{}{}:
	default:
	}
}

// groupError logs an error of kgo's group management.
func (c *Consumer[TTx]) groupError(err error) {
	c.logger.Warn("inboxkafka: group management error", "err", err)
}
