package inboxsqs

import (
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	valid := func() *Config {
		return &Config{QueueURL: "https://sqs.us-east-1.amazonaws.com/1/q", Consumer: "billing", Key: inbox.JSONKey("event_id")}
	}
	tests := []struct {
		field  string
		mutate func(*Config)
	}{
		{"Config.QueueURL", func(c *Config) { c.QueueURL = "" }},
		{"Config.Key", func(c *Config) { c.Key = nil }},
		{"Config.Consumer", func(c *Config) { c.Consumer = "" }},
		{"Config.Consumer", func(c *Config) { c.Consumer = " billing" }},
		{"Config.Workers", func(c *Config) { c.Workers = -1 }},
		{"Config.MaxBatch", func(c *Config) { c.MaxBatch = 11 }},
		{"Config.WaitTime", func(c *Config) { c.WaitTime = 21 * time.Second }},
		{"Config.WaitTime", func(c *Config) { c.WaitTime = 1500 * time.Millisecond }},
		{"Config.VisibilityTimeout", func(c *Config) { c.VisibilityTimeout = 500 * time.Millisecond }},
		{"Config.VisibilityTimeout", func(c *Config) { c.VisibilityTimeout = 13 * time.Hour }},
		{"Config.HeartbeatInterval", func(c *Config) { c.HeartbeatInterval = DefaultVisibilityTimeout }},
		{"Config.HeartbeatInterval", func(c *Config) { c.VisibilityTimeout = 2 * time.Second; c.HeartbeatInterval = 3 * time.Second }},
		{"Config.MaxDeliveries", func(c *Config) { c.MaxDeliveries = -2 }},
		{"Config.RetryBackoff", func(c *Config) { c.RetryBackoff = -time.Second }},
		{"Config.MaxRetryBackoff", func(c *Config) { c.RetryBackoff = time.Minute; c.MaxRetryBackoff = time.Second }},
		{"Config.MaxRetryBackoff", func(c *Config) { c.MaxRetryBackoff = 24 * time.Hour }},
	}
	for _, tt := range tests {
		c := valid()
		tt.mutate(c)
		cfg := c.withDefaults()
		err := cfg.validate()
		require.ErrorContains(t, err, tt.field, "%+v", cfg)
	}

	cfg := valid().withDefaults()
	require.NoError(t, cfg.validate())
	require.Equal(t, DefaultWorkers, cfg.Workers)
	require.Equal(t, DefaultMaxBatch, cfg.MaxBatch)
	require.Equal(t, DefaultWaitTime, cfg.WaitTime)
	require.Equal(t, DefaultVisibilityTimeout, cfg.VisibilityTimeout)
	require.Equal(t, DefaultVisibilityTimeout/3, cfg.HeartbeatInterval)
	require.Equal(t, DefaultMaxDeliveries, cfg.MaxDeliveries)
	require.Equal(t, DefaultRetryBackoff, cfg.RetryBackoff)
	require.Equal(t, DefaultMaxRetryBackoff, cfg.MaxRetryBackoff)
	require.Equal(t, DefaultShutdownTimeout, cfg.ShutdownTimeout)

	require.True(t, isFIFO("https://sqs.us-east-1.amazonaws.com/1/orders.fifo"))
	require.False(t, isFIFO("https://sqs.us-east-1.amazonaws.com/1/orders"))
}

func TestNewDelivery(t *testing.T) {
	t.Parallel()
	d := newDelivery("https://q", types.Message{
		MessageId:     aws.String("m-1"),
		ReceiptHandle: aws.String("rh"),
		Body:          aws.String(`{"event_id":"x"}`),
		Attributes: map[string]string{
			"ApproximateReceiveCount": "4",
			"MessageGroupId":          "order-7",
		},
		MessageAttributes: map[string]types.MessageAttributeValue{
			"event-id": {DataType: aws.String("String"), StringValue: aws.String("abc")},
			"amount":   {DataType: aws.String("Number"), StringValue: aws.String("12")},
			"sig":      {DataType: aws.String("Binary"), BinaryValue: []byte{0xff, 0x00}},
		},
	})
	require.Equal(t, 4, d.receives)
	require.Equal(t, "order-7", d.group)
	require.Equal(t, "rh", d.handle)
	require.Equal(t, inbox.Source{Transport: "sqs", Queue: "https://q", BrokerID: "m-1", Redelivered: true, Attempt: 4}, d.tr.Message.Source)
	require.Equal(t, "m-1", d.tr.Track, "counted by MessageId across receives")
	require.Equal(t, `{"event_id":"x"}`, string(d.tr.Message.Payload))
	require.Equal(t, map[string]string{"event-id": "abc", "amount": "12", "sig": "/wA="}, d.tr.Message.Headers)
	require.Empty(t, d.tr.Message.ID, "the KeyFunc sets the id, not the receive")

	for _, count := range []string{"", "0", "x", "-3"} {
		require.Equal(t, 1, receiveCount(map[string]string{"ApproximateReceiveCount": count}), count)
	}
}

func TestMessageIDKey(t *testing.T) {
	t.Parallel()
	id, err := MessageIDKey(inbox.Message{Source: inbox.Source{BrokerID: "9f1c0e4e-8c52-4a5f-9f44-4b2f3c1d2e10"}})
	require.NoError(t, err)
	require.Equal(t, "9f1c0e4e-8c52-4a5f-9f44-4b2f3c1d2e10", id)
	_, err = MessageIDKey(inbox.Message{})
	require.ErrorIs(t, err, inbox.ErrNoMessageID)
}
