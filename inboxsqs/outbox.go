package inboxsqs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/txinbox/inbox/outbox"
)

// DefaultOutboxSinkConcurrency is how many messages an OutboxSink sends at
// once by default.
const DefaultOutboxSinkConcurrency = 10

// maxAttributes is how many message attributes SQS lets a message carry.
const maxAttributes = 10

// OutboxSinkConfig configures an OutboxSink. The zero value is valid.
type OutboxSinkConfig struct {
	// Concurrency is how many SendMessage calls run at once. Defaults to
	// DefaultOutboxSinkConcurrency (10).
	Concurrency int
}

// OutboxSink publishes an outbox's events to SQS with the caller's client.
// An event's topic is the queue URL; its payload is the message body, which
// SQS requires to be non-empty text; its headers, the event id in
// outbox.HeaderEventID among them, are string message attributes, of which
// SQS allows ten. A consumer reads the id with
// inbox.HeaderKey(outbox.HeaderEventID).
//
// On a FIFO queue (a URL ending in ".fifo") the event's key is the message
// group, so a key's events are delivered in order, and the event id is the
// deduplication id, so a relay's retry within SQS's five-minute window is
// dropped by SQS itself. An event with no key is its own group.
type OutboxSink struct {
	cl          sender
	concurrency int
}

// sender is what the sink calls of an *sqs.Client.
type sender interface {
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
}

var _ outbox.Sink = (*OutboxSink)(nil)

// NewOutboxSink returns a sink over cl, the caller's configured client.
// config may be nil.
func NewOutboxSink(cl *sqs.Client, config *OutboxSinkConfig) (*OutboxSink, error) {
	if cl == nil {
		return nil, errors.New("inboxsqs: NewOutboxSink: client is nil")
	}
	var cfg OutboxSinkConfig
	if config != nil {
		cfg = *config
	}
	switch {
	case cfg.Concurrency < 0:
		return nil, fmt.Errorf("inboxsqs: OutboxSinkConfig.Concurrency must be positive, got %d", cfg.Concurrency)
	case cfg.Concurrency == 0:
		cfg.Concurrency = DefaultOutboxSinkConcurrency
	}
	return &OutboxSink{cl: cl, concurrency: cfg.Concurrency}, nil
}

// Publish implements outbox.Sink: one SendMessage per record, Concurrency
// at a time. A server fault, throttling, or a failure to reach SQS is its
// unavailability; any other answer of SQS about the message (an invalid
// body or attribute, a queue that does not exist) is a rejection.
func (s *OutboxSink) Publish(ctx context.Context, recs []outbox.Record) []error {
	errs := make([]error, len(recs))
	sem := make(chan struct{}, s.concurrency)
	var wg sync.WaitGroup
	for i, rec := range recs {
		in, err := sendInput(rec)
		if err != nil {
			errs[i] = err
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			_, err := s.cl.SendMessage(ctx, in)
			errs[i] = classifySend(err)
		}()
	}
	wg.Wait()
	return errs
}

// sendInput is the SendMessage request of rec.
func sendInput(rec outbox.Record) (*sqs.SendMessageInput, error) {
	if len(rec.Payload) == 0 {
		return nil, errors.New("inboxsqs: an SQS message body cannot be empty")
	}
	if len(rec.Headers) > maxAttributes {
		return nil, fmt.Errorf("inboxsqs: %d headers, but an SQS message carries at most %d attributes", len(rec.Headers), maxAttributes)
	}
	in := &sqs.SendMessageInput{
		QueueUrl:          aws.String(rec.Topic),
		MessageBody:       aws.String(string(rec.Payload)),
		MessageAttributes: make(map[string]types.MessageAttributeValue, len(rec.Headers)),
	}
	for k, v := range rec.Headers {
		in.MessageAttributes[k] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
	}
	if strings.HasSuffix(rec.Topic, ".fifo") {
		group := string(rec.Key)
		if group == "" {
			group = rec.ID
		}
		in.MessageGroupId = aws.String(group)
		in.MessageDeduplicationId = aws.String(rec.ID)
	}
	return in, nil
}

// throttled are the error codes of an SQS that is busy, not of a bad
// message.
var throttled = map[string]bool{
	"ThrottlingException": true, "RequestThrottled": true, "Throttling": true,
	"ServiceUnavailable": true, "InternalError": true, "InternalFailure": true,
	"KmsThrottled": true, "RequestTimeout": true,
}

// classifySend tells the relay whose fault a SendMessage error is.
func classifySend(err error) error {
	if err == nil {
		return nil
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		if api.ErrorFault() == smithy.FaultServer || throttled[api.ErrorCode()] {
			return outbox.Unavailable(err)
		}
		return err
	}
	// No answer from SQS: the network, a timeout, a cancelled context.
	return outbox.Unavailable(err)
}
