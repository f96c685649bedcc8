package inboxkafka

import (
	"context"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txinbox/inbox"
)

// Headers that a record produced to Config.DeadLetterTopic carries beside
// its own.
const (
	HeaderDeadLetterConsumer  = "inbox-dead-letter-consumer"
	HeaderDeadLetterReason    = "inbox-dead-letter-reason"
	HeaderDeadLetterError     = "inbox-dead-letter-error"
	HeaderDeadLetterAttempts  = "inbox-dead-letter-attempts"
	HeaderDeadLetterTopic     = "inbox-dead-letter-topic"
	HeaderDeadLetterPartition = "inbox-dead-letter-partition"
	HeaderDeadLetterOffset    = "inbox-dead-letter-offset"
)

// deadLetter stores r in the dead-letter table, and produces it to the
// dead-letter topic if one is configured. Only when both succeeded may its
// offset be committed.
func (c *Consumer[TTx]) deadLetter(ctx context.Context, r *record, p *inbox.DeadLetterParams, store func(*inbox.DeadLetterParams) error) error {
	if err := store(p); err != nil {
		return err
	}
	if c.cfg.DeadLetterTopic == "" {
		return nil
	}
	rec := r.rec
	out := &kgo.Record{
		Topic: c.cfg.DeadLetterTopic,
		Key:   rec.Key,
		Value: rec.Value,
		Headers: append(append([]kgo.RecordHeader(nil), rec.Headers...),
			kgo.RecordHeader{Key: HeaderDeadLetterConsumer, Value: []byte(c.cfg.Consumer)},
			kgo.RecordHeader{Key: HeaderDeadLetterReason, Value: []byte(p.Reason)},
			kgo.RecordHeader{Key: HeaderDeadLetterError, Value: []byte(p.Err.Error())},
			kgo.RecordHeader{Key: HeaderDeadLetterAttempts, Value: []byte(strconv.Itoa(p.Attempts))},
			kgo.RecordHeader{Key: HeaderDeadLetterTopic, Value: []byte(rec.Topic)},
			kgo.RecordHeader{Key: HeaderDeadLetterPartition, Value: []byte(strconv.Itoa(int(rec.Partition)))},
			kgo.RecordHeader{Key: HeaderDeadLetterOffset, Value: []byte(strconv.FormatInt(rec.Offset, 10))},
		),
	}
	if err := c.cl.ProduceSync(ctx, out).FirstErr(); err != nil {
		return fmt.Errorf("inboxkafka: produce a dead letter to %s (from %s/%d@%d): %w", c.cfg.DeadLetterTopic, rec.Topic, rec.Partition, rec.Offset, err)
	}
	return nil
}
