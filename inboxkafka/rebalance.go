package inboxkafka

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txinbox/inbox/internal/transportkit"
)

// revoked runs from kgo's OnPartitionsRevoked, before the rebalance goes
// on. It stops the revoked partitions' workers from taking new work, lets
// their transactions in flight finish (or abandons them after
// Config.ShutdownTimeout), commits the offsets of what the database committed,
// and fences the partitions off, so that nothing is committed for them once
// it returns.
func (c *Consumer[TTx]) revoked(ctx context.Context, revoked map[string][]int32) {
	if len(revoked) == 0 {
		// The cooperative balancer calls with nothing at the end of
		// each session.
		return
	}
	c.rebalanceMu.Lock()
	defer c.rebalanceMu.Unlock()
	ps := c.lookup(revoked)
	if len(ps) == 0 {
		return
	}
	c.logger.InfoContext(ctx, "inboxkafka: partitions revoked; finishing and committing", "partitions", revoked)
	c.drain(ps)
	c.finish(ctx, ps)
}

// lost runs from kgo's OnPartitionsLost: the group no longer knows this
// member, so another may own the partitions already. It fences the
// partitions off at once, abandons their transactions in flight and commits
// nothing for them.
func (c *Consumer[TTx]) lost(ctx context.Context, lost map[string][]int32) {
	if len(lost) == 0 {
		return
	}
	c.rebalanceMu.Lock()
	defer c.rebalanceMu.Unlock()
	ps := c.lookup(lost)
	if len(ps) == 0 {
		return
	}
	c.logger.WarnContext(ctx, "inboxkafka: partitions lost; abandoning them without a commit", "partitions", lost)
	c.remove(ps)
	for _, p := range ps {
		p.abandon()
	}
	for _, p := range ps {
		<-p.done
	}
	c.resume(ps)
}

// shutdown stops every partition as a revoke does, when Run returns.
func (c *Consumer[TTx]) shutdown() {
	c.rebalanceMu.Lock()
	defer c.rebalanceMu.Unlock()
	c.mu.Lock()
	c.stopped = true
	ps := make([]*partition, 0, len(c.parts))
	for _, p := range c.parts {
		ps = append(ps, p)
	}
	c.mu.Unlock()
	if len(ps) == 0 {
		return
	}
	c.drain(ps)
	c.finish(context.Background(), ps)
}

// lookup returns this consumer's partitions among m.
func (c *Consumer[TTx]) lookup(m map[string][]int32) []*partition {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ps []*partition
	for topic, partitions := range m {
		for _, n := range partitions {
			if p := c.parts[topicPartition{topic, n}]; p != nil {
				ps = append(ps, p)
			}
		}
	}
	return ps
}

// drain stops the workers of ps from taking new work and waits for them to
// return. After Config.ShutdownTimeout, it abandons their transactions in
// flight, which roll back, and waits for the workers to notice.
func (c *Consumer[TTx]) drain(ps []*partition) {
	for _, p := range ps {
		p.requestStop()
	}
	t := time.NewTimer(max(c.cfg.ShutdownTimeout, 0))
	defer t.Stop()
	expired := false
	for _, p := range ps {
		if !expired {
			select {
			case <-p.done:
				continue
			case <-t.C:
				expired = true
				c.logger.Warn("inboxkafka: transactions still in flight after the drain timeout; abandoning them", "timeout", c.cfg.ShutdownTimeout)
				for _, q := range ps {
					q.abandon()
				}
			}
		}
		<-p.done
	}
}

// finish commits the offsets of ps, retrying a failed commit until
// Config.ShutdownTimeout, then removes ps from the consumer and resumes their
// fetching. Under commitMu, no commit for ps is in flight once it returns,
// and none can start.
func (c *Consumer[TTx]) finish(ctx context.Context, ps []*partition) {
	only := make(map[topicPartition]*partition, len(ps))
	for _, p := range ps {
		only[p.tp] = p
	}
	c.commitMu.Lock()
	cctx, cancel := context.WithTimeout(ctx, max(c.cfg.ShutdownTimeout, maxCommitBackoff))
	bo := backoff{min: commitBackoff, max: maxCommitBackoff}
	for {
		err := c.commitLocked(cctx, only)
		if err == nil {
			break
		}
		if errors.Is(err, kgo.ErrClientClosed) || memberGone(err) {
			// Retrying cannot help, and would only hold the
			// rebalance up: kgo rejoins once the callback returns.
			c.logger.WarnContext(ctx, "inboxkafka: could not commit before a rebalance: the next owner redelivers the records, and finds them duplicates", "err", err)
			break
		}
		wait := bo.next()
		c.logger.WarnContext(ctx, "inboxkafka: offset commit before a rebalance failed; retrying", "backoff", wait, "err", err)
		if !transportkit.Sleep(cctx, wait) {
			c.logger.ErrorContext(ctx, "inboxkafka: gave up committing before a rebalance: the next owner redelivers the records, and finds them duplicates", "err", err)
			break
		}
	}
	cancel()
	c.remove(ps)
	c.commitMu.Unlock()
	c.resume(ps)
}

// memberGone reports whether err says that the group no longer knows this
// member in the generation it committed with.
func memberGone(err error) bool {
	return errors.Is(err, kerr.IllegalGeneration) || errors.Is(err, kerr.UnknownMemberID) || errors.Is(err, kerr.FencedInstanceID)
}

// remove takes ps out of the consumer: a mark from their workers is dropped
// from now on, and no commit includes them.
func (c *Consumer[TTx]) remove(ps []*partition) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range ps {
		if c.parts[p.tp] == p {
			delete(c.parts, p.tp)
		}
	}
}

// resume resumes fetching ps: a paused partition stays paused in the
// client, even when it is assigned again.
func (c *Consumer[TTx]) resume(ps []*partition) {
	m := make(map[string][]int32)
	for _, p := range ps {
		m[p.tp.topic] = append(m[p.tp.topic], p.tp.partition)
	}
	c.cl.ResumeFetchPartitions(m)
}
