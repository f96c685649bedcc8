package inboxsqs_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/txinbox/inbox/inboxsqs"
	"github.com/txinbox/inbox/internal/require"
	"github.com/txinbox/inbox/outbox/outboxtest"
)

// The sink conformance suite on goaws: a standard queue of the test's own,
// read back with its message attributes.
func TestOutboxSinkConformance(t *testing.T) {
	h := newHarness(t)
	q := h.createQueue("conformance", false)
	sink, err := inboxsqs.NewOutboxSink(newSQSClient(h.endpoint, http.DefaultClient), nil)
	require.NoError(t, err)
	var buffered []outboxtest.Received
	outboxtest.Run(t, outboxtest.Harness{
		Sink:  sink,
		Topic: q,
		Read: func(t *testing.T, n int) []outboxtest.Received {
			deadline := time.Now().Add(time.Minute)
			for len(buffered) < n {
				if time.Now().After(deadline) {
					t.Fatalf("read %d of %d messages", len(buffered), n)
				}
				out, err := h.admin.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
					QueueUrl: aws.String(q), MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
					MessageAttributeNames: []string{"All"},
				})
				require.NoError(t, err)
				for _, m := range out.Messages {
					r := outboxtest.Received{Headers: map[string]string{}, Payload: []byte(aws.ToString(m.Body))}
					for k, v := range m.MessageAttributes {
						r.Headers[k] = aws.ToString(v.StringValue)
					}
					buffered = append(buffered, r)
					_, err := h.admin.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: aws.String(q), ReceiptHandle: m.ReceiptHandle})
					require.NoError(t, err)
				}
			}
			got := buffered[:n]
			buffered = buffered[n:]
			return got
		},
	})
}
