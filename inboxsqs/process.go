package inboxsqs

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxtransport"
	"github.com/txinbox/inbox/internal/fault"
)

// runResult is what a run left to its caller.
type runResult struct {
	// requeue are the deliveries an ordered run did not attempt.
	requeue []*delivery
	// retry is the longest backoff visibility set on a delivery of the
	// run, counted from retryFrom; 0 when none was retried.
	retry     time.Duration
	retryFrom time.Time
}

// processRun processes a run of deliveries through the inbox's shared
// delivery policy, as one batch (in order when ordered), and settles each:
// delete what committed or was dead-lettered, set a backoff visibility on
// what may succeed later, release what shutdown cancelled.
func (c *Consumer[TTx]) processRun(ctx context.Context, run []*delivery, ordered bool) runResult {
	var res runResult
	var del, retry, release []*delivery
	var delays []time.Duration
	for i, s := range c.policy.Process(ctx, run, ordered) {
		d := run[i]
		switch s.Verdict {
		case inboxtransport.Ack, inboxtransport.DeadLettered:
			del = append(del, d)
		case inboxtransport.Retry:
			retry, delays = append(retry, d), append(delays, ceilSeconds(s.Delay))
		case inboxtransport.Release:
			release = append(release, d)
		case inboxtransport.Requeue:
			res.requeue = append(res.requeue, d)
		}
	}
	if len(del) > 0 {
		fault.Inject(ctx, fault.AfterCommitBeforeAck)
		c.delete(ctx, del)
	}
	if len(retry) > 0 {
		res.retryFrom = time.Now()
		for i, d := range retry {
			c.handBack(ctx, []*delivery{d}, delays[i])
			res.retry = max(res.retry, delays[i])
		}
	}
	if len(release) > 0 {
		c.handBack(ctx, release, 0)
	}
	return res
}

// deadLetter stores d in the dead-letter store and, when one is configured,
// sends a copy to the dead-letter queue. The caller deletes d only when it
// returns nil.
func (c *Consumer[TTx]) deadLetter(ctx context.Context, d *delivery, p *inbox.DeadLetterParams, store func(*inbox.DeadLetterParams) error) error {
	if err := store(p); err != nil {
		return err
	}
	if c.config.DeadLetterQueueURL == "" {
		return nil
	}
	in := &sqs.SendMessageInput{
		QueueUrl:          aws.String(c.config.DeadLetterQueueURL),
		MessageBody:       d.raw.Body,
		MessageAttributes: sendAttributes(d.raw.MessageAttributes),
	}
	if isFIFO(c.config.DeadLetterQueueURL) {
		group := d.group
		if group == "" {
			group = "inbox-dead-letters"
		}
		in.MessageGroupId = aws.String(group)
		in.MessageDeduplicationId = d.raw.MessageId
	}
	if _, err := c.api.SendMessage(ctx, in); err != nil {
		return fmt.Errorf("inboxsqs: send to the dead-letter queue %s: %w", c.config.DeadLetterQueueURL, err)
	}
	return nil
}

// sendAttributes copies received message attributes for a send.
func sendAttributes(attrs map[string]types.MessageAttributeValue) map[string]types.MessageAttributeValue {
	if len(attrs) == 0 {
		return nil
	}
	out := make(map[string]types.MessageAttributeValue, len(attrs))
	for name, v := range attrs {
		out[name] = types.MessageAttributeValue{
			DataType:    v.DataType,
			StringValue: v.StringValue,
			BinaryValue: v.BinaryValue,
		}
	}
	return out
}

// delete settles ds and deletes them with one DeleteMessageBatch. A failed
// delete is logged and left: the message comes back when its visibility
// timeout expires, and its redelivery is a duplicate the inbox skips.
func (c *Consumer[TTx]) delete(ctx context.Context, ds []*delivery) {
	entries := make([]types.DeleteMessageBatchRequestEntry, 0, len(ds))
	byID := make(map[string]*delivery, len(ds))
	for i, d := range ds {
		if !d.settle() {
			continue
		}
		c.leases.Remove(d)
		id := strconv.Itoa(i)
		byID[id] = d
		entries = append(entries, types.DeleteMessageBatchRequestEntry{Id: aws.String(id), ReceiptHandle: aws.String(d.handle)})
	}
	for len(entries) > 0 {
		n := min(len(entries), MaxMessagesLimit)
		chunk := entries[:n]
		entries = entries[n:]
		sctx, cancel := settleContext(ctx)
		out, err := c.api.DeleteMessageBatch(sctx, &sqs.DeleteMessageBatchInput{
			QueueUrl: aws.String(c.config.QueueURL),
			Entries:  chunk,
		})
		cancel()
		if err != nil {
			c.logger.WarnContext(ctx, "inboxsqs: delete failed; the messages will be delivered again and skipped",
				"queue", c.config.QueueURL, "count", len(chunk), "err", err)
			continue
		}
		for _, f := range out.Failed {
			d := byID[aws.ToString(f.Id)]
			messageID := ""
			if d != nil {
				messageID = d.tr.Message.Source.BrokerID
			}
			c.logger.WarnContext(ctx, "inboxsqs: delete failed; the message will be delivered again and skipped",
				"queue", c.config.QueueURL, "message_id", messageID, "code", aws.ToString(f.Code), "err", aws.ToString(f.Message))
		}
	}
}

// handBack settles ds and sets their visibility timeout to wait, rounded up
// to whole seconds, or to 0 (visible at once) when wait is not positive.
func (c *Consumer[TTx]) handBack(ctx context.Context, ds []*delivery, wait time.Duration) {
	var timeout int32
	if wait > 0 {
		timeout = seconds(ceilSeconds(wait))
	}
	for _, d := range ds {
		if !d.settle() {
			continue
		}
		c.leases.Remove(d)
		sctx, cancel := settleContext(ctx)
		_, err := c.api.ChangeMessageVisibility(sctx, &sqs.ChangeMessageVisibilityInput{
			QueueUrl:          aws.String(c.config.QueueURL),
			ReceiptHandle:     aws.String(d.handle),
			VisibilityTimeout: timeout,
		})
		cancel()
		if err != nil {
			c.logger.WarnContext(ctx, "inboxsqs: could not change a message's visibility; it comes back when its timeout expires",
				"queue", c.config.QueueURL, "message_id", d.tr.Message.Source.BrokerID, "visibility", timeout, "err", err)
		}
	}
}

// settleContext returns a context for a call that settles a message: it
// keeps ctx's values, outlives its cancellation, and is bounded.
func settleContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
}
