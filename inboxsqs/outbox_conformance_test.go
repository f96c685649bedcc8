package inboxsqs_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox/inboxsqs"
	"github.com/txinbox/inbox/outbox/outboxtest"
)

// The sink conformance suite on goaws: a standard queue of the test's own,
// read back with its message attributes.
func TestOutboxSinkConformance(t *testing.T) {
	h := newHarness(t)
	q := h.createQueue("conformance", false)
	sink, err := inboxsqs.NewOutboxSink(newSQSClient(h.endpoint, http.DefaultClient), nil)
	require.NoError(t, err)
	outboxtest.Run(t, outboxtest.Harness{
		Sink:  sink,
		Topic: q,
		Receive: func(ctx context.Context) ([]outboxtest.Received, error) {
			got, err := h.admin.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
				QueueUrl: aws.String(q), MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
				MessageAttributeNames: []string{"All"},
			})
			if err != nil {
				return nil, err
			}
			var out []outboxtest.Received
			for _, m := range got.Messages {
				r := outboxtest.Received{Headers: map[string]string{}, Payload: []byte(aws.ToString(m.Body))}
				for k, v := range m.MessageAttributes {
					r.Headers[k] = aws.ToString(v.StringValue)
				}
				out = append(out, r)
				// The suite reads each message once: delete it even if ctx
				// has ended since it was received.
				if _, err := h.admin.DeleteMessage(context.WithoutCancel(ctx), &sqs.DeleteMessageInput{QueueUrl: aws.String(q), ReceiptHandle: m.ReceiptHandle}); err != nil {
					return out, err
				}
			}
			return out, nil
		},
	})
}
