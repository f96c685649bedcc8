package inboxsqs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxtransport"
)

// source is a consumer's SQS side of the delivery loop: receive, delete,
// change visibility.
type source struct {
	api    sqsAPI
	config *Config
	logger *slog.Logger
}

// Receive long-polls for up to n messages.
func (s *source) Receive(ctx context.Context, n int) ([]*delivery, error) {
	out, err := s.api.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl:              aws.String(s.config.QueueURL),
		MaxNumberOfMessages:   int32(n),
		WaitTimeSeconds:       seconds(s.config.WaitTime),
		VisibilityTimeout:     seconds(s.config.VisibilityTimeout),
		MessageAttributeNames: []string{"All"},
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{
			types.MessageSystemAttributeNameApproximateReceiveCount,
			types.MessageSystemAttributeNameMessageGroupId,
		},
	})
	if err != nil {
		if ctx.Err() != nil {
			// A receive cut short may have been served: its messages
			// come back when their visibility timeout expires.
			return nil, nil
		}
		return nil, fmt.Errorf("inboxsqs: receive from %s: %w", s.config.QueueURL, err)
	}
	ds := make([]*delivery, 0, len(out.Messages))
	for _, m := range out.Messages {
		ds = append(ds, newDelivery(s.config.QueueURL, m))
	}
	return ds, nil
}

// Ack deletes ds, whose transactions committed, with DeleteMessageBatch.
func (s *source) Ack(ctx context.Context, ds []*delivery) { s.delete(ctx, ds) }

// Reject deletes d, which is in the dead-letter store (and the
// dead-letter queue, if one is configured).
func (s *source) Reject(ctx context.Context, d *delivery, _ string) { s.delete(ctx, []*delivery{d}) }

// Retry sets d's visibility timeout to delay, rounded up to whole seconds.
func (s *source) Retry(ctx context.Context, d *delivery, delay time.Duration) {
	s.setVisibility(ctx, d, seconds(ceilSeconds(delay)))
}

// Release makes ds visible again at once.
func (s *source) Release(ctx context.Context, ds []*delivery) {
	for _, d := range ds {
		s.setVisibility(ctx, d, 0)
	}
}

// Extend sets d's visibility back to the full timeout.
func (s *source) Extend(ctx context.Context, d *delivery) error {
	_, err := s.api.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl:          aws.String(s.config.QueueURL),
		ReceiptHandle:     aws.String(d.handle),
		VisibilityTimeout: seconds(s.config.VisibilityTimeout),
	})
	if notInFlight(err) {
		// The message became visible (a heartbeat came too late) or was
		// deleted.
		return fmt.Errorf("%w: %w", inboxtransport.ErrNotHeld, err)
	}
	return err
}

// ExtendInterval is Config.HeartbeatInterval.
func (s *source) ExtendInterval() time.Duration { return s.config.HeartbeatInterval }

// delete deletes ds with one DeleteMessageBatch per ten. A failed delete
// is logged and left: the message comes back when its visibility timeout
// expires, and its redelivery is a duplicate the inbox skips.
func (s *source) delete(ctx context.Context, ds []*delivery) {
	for len(ds) > 0 {
		chunk := ds[:min(len(ds), MaxMessagesLimit)]
		ds = ds[len(chunk):]
		entries := make([]types.DeleteMessageBatchRequestEntry, len(chunk))
		for i, d := range chunk {
			entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(d.handle)}
		}
		sctx, cancel := settleContext(ctx)
		out, err := s.api.DeleteMessageBatch(sctx, &sqs.DeleteMessageBatchInput{
			QueueUrl: aws.String(s.config.QueueURL),
			Entries:  entries,
		})
		cancel()
		if err != nil {
			s.logger.WarnContext(ctx, "inboxsqs: delete failed; the messages will be delivered again and skipped",
				"queue", s.config.QueueURL, "count", len(chunk), "err", err)
			continue
		}
		for _, f := range out.Failed {
			messageID := ""
			if i, err := strconv.Atoi(aws.ToString(f.Id)); err == nil && i >= 0 && i < len(chunk) {
				messageID = chunk[i].tr.Message.Source.BrokerID
			}
			s.logger.WarnContext(ctx, "inboxsqs: delete failed; the message will be delivered again and skipped",
				"queue", s.config.QueueURL, "message_id", messageID, "code", aws.ToString(f.Code), "err", aws.ToString(f.Message))
		}
	}
}

// setVisibility sets d's visibility timeout to timeout seconds.
func (s *source) setVisibility(ctx context.Context, d *delivery, timeout int32) {
	sctx, cancel := settleContext(ctx)
	defer cancel()
	_, err := s.api.ChangeMessageVisibility(sctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl:          aws.String(s.config.QueueURL),
		ReceiptHandle:     aws.String(d.handle),
		VisibilityTimeout: timeout,
	})
	if err != nil {
		s.logger.WarnContext(ctx, "inboxsqs: could not change a message's visibility; it comes back when its timeout expires",
			"queue", s.config.QueueURL, "message_id", d.tr.Message.Source.BrokerID, "visibility", timeout, "err", err)
	}
}

// deadLetter stores d in the dead-letter store and, when one is configured,
// sends a copy to the dead-letter queue. The loop deletes d only when it
// returns nil.
func (s *source) deadLetter(ctx context.Context, d *delivery, p *inbox.DeadLetterParams, store func(*inbox.DeadLetterParams) error) error {
	if err := store(p); err != nil {
		return err
	}
	if s.config.DeadLetterQueueURL == "" {
		return nil
	}
	in := &sqs.SendMessageInput{
		QueueUrl:          aws.String(s.config.DeadLetterQueueURL),
		MessageBody:       d.raw.Body,
		MessageAttributes: sendAttributes(d.raw.MessageAttributes),
	}
	if isFIFO(s.config.DeadLetterQueueURL) {
		group := d.group
		if group == "" {
			group = "inbox-dead-letters"
		}
		in.MessageGroupId = aws.String(group)
		in.MessageDeduplicationId = d.raw.MessageId
	}
	if _, err := s.api.SendMessage(ctx, in); err != nil {
		return fmt.Errorf("inboxsqs: send to the dead-letter queue %s: %w", s.config.DeadLetterQueueURL, err)
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

// settleContext returns a context for a call that settles a message: it
// keeps ctx's values, outlives its cancellation, and is bounded.
func settleContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
}

// notInFlight reports whether err says that a receipt handle no longer
// names a message in flight. SQS answers MessageNotInflight, or
// InvalidParameterValue for a receipt handle that expired; goaws answers
// AWS.SimpleQueueService.MessageNotInFlight.
func notInFlight(err error) bool {
	var apiErr smithy.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	code := strings.ToLower(apiErr.ErrorCode())
	code = code[strings.LastIndexByte(code, '.')+1:]
	switch code {
	case "messagenotinflight", "receipthandleisinvalid", "invalidparametervalue":
		return true
	}
	return false
}

// seconds converts d, whole seconds, to the int32 the SQS API takes.
func seconds(d time.Duration) int32 {
	return int32(d / time.Second)
}

// ceilSeconds rounds d up to whole seconds, at least one: SQS counts
// visibility in seconds, and 0 would make a message visible at once.
func ceilSeconds(d time.Duration) time.Duration {
	s := (d + time.Second - 1) / time.Second
	return max(s, 1) * time.Second
}
