package inboxkafka

import (
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

// deadLetter stores rec in the dead-letter table, produces it to the
// dead-letter topic if one is configured, and reports whether both
// succeeded. Only then may its offset be committed.
func (c *Consumer[TTx]) deadLetter(p *partition, rec *kgo.Record, msg inbox.Message, cause error, reason string, attempts int) bool {
	ctx := p.ctx
	err := c.client.DeadLetter(ctx, inbox.DeadLetterParams{
		Consumer: c.cfg.Consumer,
		Message:  msg,
		Reason:   reason,
		Err:      cause,
		Attempts: attempts,
	})
	if err != nil {
		// The store's failure, logged once per outage by the breaker.
		c.breaker.Decide(ctx, msg, err, 0, 0)
		c.logger.DebugContext(ctx, "inboxkafka: could not dead-letter a record; trying again after a backoff",
			"topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset, "err", err)
		return false
	}
	if c.cfg.DeadLetterTopic != "" {
		out := &kgo.Record{
			Topic: c.cfg.DeadLetterTopic,
			Key:   rec.Key,
			Value: rec.Value,
			Headers: append(append([]kgo.RecordHeader(nil), rec.Headers...),
				kgo.RecordHeader{Key: HeaderDeadLetterConsumer, Value: []byte(c.cfg.Consumer)},
				kgo.RecordHeader{Key: HeaderDeadLetterReason, Value: []byte(reason)},
				kgo.RecordHeader{Key: HeaderDeadLetterError, Value: []byte(cause.Error())},
				kgo.RecordHeader{Key: HeaderDeadLetterAttempts, Value: []byte(strconv.Itoa(attempts))},
				kgo.RecordHeader{Key: HeaderDeadLetterTopic, Value: []byte(rec.Topic)},
				kgo.RecordHeader{Key: HeaderDeadLetterPartition, Value: []byte(strconv.Itoa(int(rec.Partition)))},
				kgo.RecordHeader{Key: HeaderDeadLetterOffset, Value: []byte(strconv.FormatInt(rec.Offset, 10))},
			),
		}
		if err := c.cl.ProduceSync(ctx, out).FirstErr(); err != nil {
			c.logger.WarnContext(ctx, "inboxkafka: could not produce a dead letter to its topic; trying again after a backoff",
				"topic", c.cfg.DeadLetterTopic, "source", fmt.Sprintf("%s/%d@%d", rec.Topic, rec.Partition, rec.Offset), "err", err)
			return false
		}
	}
	c.report(Result{Record: rec, ID: msg.ID, Err: cause, Fault: inbox.Judge(cause), Attempts: attempts, DeadLettered: true})
	return true
}
