package inboxsqs_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/jackc/pgx/v5"

	"github.com/txinbox/inbox/inboxpgx/inboxpgxtest"
	"github.com/txinbox/inbox/inboxsqs"
	"github.com/txinbox/inbox/inboxtransport"
	"github.com/txinbox/inbox/inboxtransport/transporttest"
	"github.com/txinbox/inbox/internal/testdb"
	"github.com/txinbox/inbox/outbox"
)

// TestTransport runs the transport conformance suite on goaws, one case at
// a time (goaws keeps its queues in global state). The queues are named
// counted-…, so that the receive counter gives their messages the
// ApproximateReceiveCount that goaws does not keep.
func TestTransport(t *testing.T) { transporttest.Exercise(t, transport) }

var transport = inboxpgxtest.Transport("sqs", transporttest.Features{Ordered: true, HoldTime: testVisibility, ProcessCrash: true, MaxCrashes: inboxtransport.DefaultMaxCrashes, Serial: true}, newQueue, openQueue)

// queue is a queue on goaws; an ordered one is a FIFO queue with one
// message group.
type queue struct {
	endpoint, url string
	api           *sqs.Client
}

func newQueue(t testing.TB, opts transporttest.QueueOptions) transporttest.Queue[pgx.Tx] {
	endpoint, _ := startGoaws()
	name := "counted-" + testdb.RandomSuffix()
	if opts.Ordered {
		name += ".fifo"
	}
	api := newSQSClient(endpoint, http.DefaultClient)
	out, err := api.CreateQueue(context.Background(), &sqs.CreateQueueInput{QueueName: aws.String(name)})
	if err != nil {
		t.Fatal(err)
	}
	return &queue{endpoint: endpoint, url: aws.ToString(out.QueueUrl), api: api}
}

// openQueue opens the queue named "endpoint|queue URL".
func openQueue(name string) (transporttest.Queue[pgx.Tx], error) {
	endpoint, u, ok := strings.Cut(name, "|")
	if !ok {
		return nil, errors.New("inboxsqs test: malformed queue name " + name)
	}
	return &queue{endpoint: endpoint, url: u, api: newSQSClient(endpoint, http.DefaultClient)}, nil
}

func (q *queue) Name() string { return q.endpoint + "|" + q.url }

func (q *queue) Publish(ctx context.Context, msgs ...transporttest.Message) error {
	for _, m := range msgs {
		in := &sqs.SendMessageInput{QueueUrl: aws.String(q.url), MessageBody: aws.String(string(m.Body))}
		if m.ID != "" {
			in.MessageAttributes = map[string]types.MessageAttributeValue{
				outbox.HeaderEventID: {DataType: aws.String("String"), StringValue: aws.String(m.ID)},
			}
		}
		if strings.HasSuffix(q.url, ".fifo") {
			in.MessageGroupId = aws.String("g")
			in.MessageDeduplicationId = aws.String(testdb.RandomSuffix())
		}
		if _, err := q.api.SendMessage(ctx, in); err != nil {
			return err
		}
	}
	return nil
}

func (q *queue) Consumer(opts transporttest.ConsumerOptions[pgx.Tx]) (transporttest.Runner, error) {
	// SQS receives at most ten messages at once.
	opts.Settings.MaxBatch = min(opts.Settings.MaxBatch, inboxsqs.MaxMessagesLimit)
	c, err := inboxsqs.New(newSQSClient(q.endpoint, http.DefaultClient), opts.Client, opts.Handler, &inboxsqs.Config{
		QueueURL:          q.url,
		Consumer:          opts.Consumer,
		Key:               opts.Key,
		WaitTime:          testWait,
		VisibilityTimeout: testVisibility,
		Settings:          opts.Settings,
	})
	if err != nil {
		return nil, err
	}
	if opts.ReceiveAhead != nil {
		inboxsqs.ReceiveAhead(c, *opts.ReceiveAhead)
	}
	return c, nil
}

// Depth is how many messages the queue holds, visible or in flight.
func (q *queue) Depth(ctx context.Context) (int, error) {
	out, err := q.api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(q.url),
		AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeNameApproximateNumberOfMessages,
			types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
		},
	})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, a := range []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible} {
		v, err := strconv.Atoi(out.Attributes[string(a)])
		if err != nil {
			return 0, err
		}
		n += v
	}
	return n, nil
}

// BenchmarkReceiveAhead measures the consumer with its next receive made
// while the current batch commits, and without (see
// transporttest.Benchmark). SQS returns at most ten messages a receive.
func BenchmarkReceiveAhead(b *testing.B) { transporttest.Benchmark(b, transport) }
