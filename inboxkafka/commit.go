package inboxkafka

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/txinbox/inbox/internal/transportkit"
)

// A failed offset commit is sent again after a backoff that doubles, with
// jitter, from commitBackoff to maxCommitBackoff.
const (
	commitBackoff    = 100 * time.Millisecond
	maxCommitBackoff = 2 * time.Second
)

// commitLoop commits the marked offsets after each mark, and retries a
// failed commit with backoff until it succeeds: kgo does not retry a commit
// that failed, and a partition whose last records were in that commit
// would otherwise never be committed.
func (c *Consumer[TTx]) commitLoop(ctx context.Context) {
	bo := backoff{min: commitBackoff, max: maxCommitBackoff}
	for {
		select {
		case <-c.commitKey:
		case <-ctx.Done():
			return
		}
		for {
			err := c.commit(ctx, nil)
			if err == nil {
				bo.reset()
				break
			}
			if ctx.Err() != nil {
				return
			}
			wait := bo.next()
			c.logger.WarnContext(ctx, "inboxkafka: offset commit failed; retrying", "backoff", wait, "err", err)
			if !transportkit.Sleep(ctx, wait) {
				return
			}
		}
	}
}

// commit commits the marked offsets of the partitions in only, or of every
// partition when only is nil.
func (c *Consumer[TTx]) commit(ctx context.Context, only map[topicPartition]*partition) error {
	c.commitMu.Lock()
	defer c.commitMu.Unlock()
	return c.commitLocked(ctx, only)
}

// commitLocked is commit under commitMu. It returns an error naming each
// partition that was not committed.
func (c *Consumer[TTx]) commitLocked(ctx context.Context, only map[topicPartition]*partition) error {
	offsets := make(map[string]map[int32]kgo.EpochOffset)
	gens := make(map[topicPartition]uint64)
	c.mu.Lock()
	for k, p := range c.parts {
		if only != nil && only[k] != p {
			continue
		}
		if p.next.Offset <= p.committed {
			continue
		}
		if offsets[k.topic] == nil {
			offsets[k.topic] = make(map[int32]kgo.EpochOffset)
		}
		offsets[k.topic][k.partition] = p.next
		gens[k] = p.gen
	}
	c.mu.Unlock()
	if len(gens) == 0 {
		return nil
	}

	var errs []error
	committed := make(map[topicPartition]int64, len(gens))
	c.cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			errs = append(errs, err)
			return
		}
		// Responses from v10 on name topics by id only.
		names := make(map[[16]byte]string, len(req.Topics))
		for _, t := range req.Topics {
			names[t.TopicID] = t.Topic
		}
		for _, t := range resp.Topics {
			topic := t.Topic
			if topic == "" {
				topic = names[t.TopicID]
			}
			for _, rp := range t.Partitions {
				if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
					errs = append(errs, fmt.Errorf("%s/%d: %w", topic, rp.Partition, err))
					continue
				}
				if eo, ok := offsets[topic][rp.Partition]; ok {
					committed[topicPartition{topic, rp.Partition}] = eo.Offset
				}
			}
		}
	})
	if len(errs) == 0 && len(committed) < len(gens) {
		errs = append(errs, fmt.Errorf("the broker answered for %d of %d partitions", len(committed), len(gens)))
	}

	c.mu.Lock()
	for k, off := range committed {
		if p := c.parts[k]; p != nil && p.gen == gens[k] && off > p.committed {
			p.committed = off
		}
	}
	c.mu.Unlock()
	if len(errs) > 0 {
		return fmt.Errorf("inboxkafka: commit offsets: %w", errors.Join(errs...))
	}
	c.logger.DebugContext(ctx, "inboxkafka: committed offsets", "offsets", offsets)
	return nil
}
