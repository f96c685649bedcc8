package inboxsqs

import (
	"encoding/base64"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxtransport"
)

// Transport is the inbox.Source.Transport of the messages this package
// delivers.
const Transport = "sqs"

// delivery is one received message while the consumer holds it: from the
// receive until it is deleted or handed back to the queue.
type delivery struct {
	raw      types.Message
	tr       inboxtransport.Delivery // its message; ID is empty until the KeyFunc ran
	handle   string                  // receipt handle
	receives int                     // ApproximateReceiveCount
	group    string                  // MessageGroupId; "" on a standard queue
}

func newDelivery(queueURL string, m types.Message) *delivery {
	receives := receiveCount(m.Attributes)
	return &delivery{
		raw: m,
		tr: inboxtransport.Delivery{
			Message: inbox.Message{
				Payload: []byte(aws.ToString(m.Body)),
				Headers: headers(m.MessageAttributes),
				Source: inbox.Source{
					Transport:   Transport,
					Queue:       queueURL,
					BrokerID:    aws.ToString(m.MessageId),
					Redelivered: receives > 1,
					Attempt:     receives,
				},
			},
			Track: aws.ToString(m.MessageId),
		},
		handle:   aws.ToString(m.ReceiptHandle),
		receives: receives,
		group:    m.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)],
	}
}

// Delivery returns the delivery as the policy sees it.
func (d *delivery) Delivery() *inboxtransport.Delivery { return &d.tr }

// headers turns message attributes into inbox headers: string and number
// attributes by their value, binary ones in standard base64.
func headers(attrs map[string]types.MessageAttributeValue) map[string]string {
	if len(attrs) == 0 {
		return nil
	}
	h := make(map[string]string, len(attrs))
	for name, v := range attrs {
		switch {
		case v.StringValue != nil:
			h[name] = *v.StringValue
		case v.BinaryValue != nil:
			h[name] = base64.StdEncoding.EncodeToString(v.BinaryValue)
		}
	}
	return h
}

// receiveCount reads ApproximateReceiveCount. A message without a valid
// count is taken to be on its first receive.
func receiveCount(attrs map[string]string) int {
	n, err := strconv.Atoi(attrs[string(types.MessageSystemAttributeNameApproximateReceiveCount)])
	if err != nil || n < 1 {
		return 1
	}
	return n
}
