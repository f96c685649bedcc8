package inboxsqs

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"
	"github.com/txinbox/inbox/inboxtransport"
)

// leases holds the deliveries a consumer has received and not yet settled,
// and keeps them invisible: a heartbeat extends the visibility of each one
// that was last extended HeartbeatInterval ago, whether its handler is
// running or it waits for its group.
type leases struct {
	inboxtransport.Held[*delivery]
}

func newLeases() *leases { return &leases{} }

// due returns the held deliveries last extended at or before cutoff.
func (l *leases) due(cutoff time.Time) []*delivery {
	held := l.All()
	out := held[:0]
	for _, d := range held {
		d.mu.Lock()
		if !d.settled && !d.lost && !d.extended.After(cutoff) {
			out = append(out, d)
		}
		d.mu.Unlock()
	}
	return out
}

// heartbeat extends held deliveries until ctx is done. It checks twice per
// HeartbeatInterval, so a delivery is extended at most one and a half
// intervals after its last extension.
func (c *Consumer[TTx]) heartbeat(ctx context.Context) {
	tick := time.NewTicker(max(c.config.HeartbeatInterval/2, time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, d := range c.leases.due(time.Now().Add(-c.config.HeartbeatInterval)) {
			if ctx.Err() != nil {
				return
			}
			c.extend(ctx, d)
		}
	}
}

// extend sets d's visibility back to the full timeout, unless d was settled
// meanwhile.
func (c *Consumer[TTx]) extend(ctx context.Context, d *delivery) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.settled || d.lost {
		return
	}
	start := time.Now()
	// A hung call must not hold up the other held messages' heartbeats
	// for longer than an interval.
	cctx, cancel := context.WithTimeout(ctx, c.config.HeartbeatInterval)
	defer cancel()
	_, err := c.api.ChangeMessageVisibility(cctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl:          aws.String(c.config.QueueURL),
		ReceiptHandle:     aws.String(d.handle),
		VisibilityTimeout: seconds(c.config.VisibilityTimeout),
	})
	switch {
	case err == nil:
		d.extended = start
	case ctx.Err() != nil:
	case notInFlight(err):
		// The message became visible (a heartbeat came too late) or was
		// deleted. Another consumer may receive it; the inbox makes that
		// delivery a skip or waits for this one's claim.
		d.lost = true
		c.logger.WarnContext(ctx, "inboxsqs: lost a message's visibility: it may be delivered again",
			"queue", c.config.QueueURL, "message_id", d.tr.Message.Source.BrokerID, "err", err)
	default:
		c.logger.WarnContext(ctx, "inboxsqs: heartbeat failed", "queue", c.config.QueueURL,
			"message_id", d.tr.Message.Source.BrokerID, "err", err)
	}
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
