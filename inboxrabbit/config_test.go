package inboxrabbit

import (
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxtransport/transporttest"
	"github.com/txinbox/inbox/outbox"
)

// TestConfigValidate: each field's error names it.
func TestConfigValidate(t *testing.T) {
	t.Parallel()
	transporttest.CheckConfig(t, func() *Config {
		return &Config{Queue: "q", Consumer: "billing", Key: inbox.HeaderKey(outbox.HeaderEventID)}
	}, func(c *Config) error {
		cfg := c.withDefaults()
		return cfg.validate()
	}, []transporttest.ConfigCase[Config]{
		{Name: "valid", Adjust: func(*Config) {}, Want: ""},
		{Name: "no queue", Adjust: func(c *Config) { c.Queue = "" }, Want: "Config.Queue"},
		{Name: "no key", Adjust: func(c *Config) { c.Key = nil }, Want: "Config.Key"},
		{Name: "no consumer", Adjust: func(c *Config) { c.Consumer = "" }, Want: "Config.Consumer"},
		{Name: "negative workers", Adjust: func(c *Config) { c.Workers = -1 }, Want: "Config.Workers"},
		{Name: "prefetch below batch", Adjust: func(c *Config) { c.MaxBatch, c.Prefetch = 10, 5 }, Want: "Config.Prefetch"},
		{Name: "prefetch too large", Adjust: func(c *Config) { c.Prefetch = 70000 }, Want: "Config.Prefetch"},
		{Name: "ordered defaults", Adjust: func(c *Config) { c.Ordered = true }, Want: ""},
		{Name: "ordered with workers", Adjust: func(c *Config) { c.Ordered, c.Workers = true, 2 }, Want: "Config.Workers must be 1"},
		{Name: "ordered with batch", Adjust: func(c *Config) { c.Ordered, c.MaxBatch, c.Prefetch = true, 5, 5 }, Want: "Config.MaxBatch must be 1"},
		{Name: "ordered with prefetch", Adjust: func(c *Config) { c.Ordered, c.Prefetch = true, 5 }, Want: "Config.Prefetch must be 1"},
		{Name: "negative max deliveries", Adjust: func(c *Config) { c.MaxDeliveries = -1 }, Want: "Config.MaxDeliveries"},
		{Name: "retry cap over the limit", Adjust: func(c *Config) { c.MaxRetryBackoff = time.Hour }, Want: "Config.MaxRetryBackoff"},
		{Name: "negative batch wait", Adjust: func(c *Config) { c.BatchWait = -time.Millisecond }, Want: "Config.BatchWait"},
		{Name: "reconnect cap below base", Adjust: func(c *Config) { c.ReconnectBackoff, c.MaxReconnectBackoff = time.Minute, time.Second }, Want: "Config.MaxReconnectBackoff"},
	})
	cfg := (&Config{Ordered: true}).withDefaults()
	require.Equal(t, 1, cfg.Workers)
	require.Equal(t, 1, cfg.MaxBatch)
	require.Equal(t, 1, cfg.Prefetch)
	cfg = (&Config{}).withDefaults()
	require.Equal(t, 2*DefaultWorkers*DefaultMaxBatch, cfg.Prefetch)
}

// TestDeliveryCount reads a quorum queue's x-delivery-count in each of the
// integer types a table can carry.
func TestDeliveryCount(t *testing.T) {
	t.Parallel()
	require.Equal(t, 0, deliveryCount(nil))
	require.Equal(t, 0, deliveryCount(amqp.Table{"other": int64(3)}))
	for _, v := range []any{int64(2), int32(2), int16(2), int8(2), int(2), uint8(2), uint16(2), uint32(2)} {
		require.Equal(t, 3, deliveryCount(amqp.Table{headerDeliveryCount: v}), "%T", v)
	}
	require.Equal(t, 0, deliveryCount(amqp.Table{headerDeliveryCount: "2"}))
	require.Equal(t, 0, deliveryCount(amqp.Table{headerDeliveryCount: int64(-1)}))
	require.Equal(t, 0, deliveryCount(amqp.Table{headerDeliveryCount: int64(1 << 40)}))
}

// TestHeaderText writes each kind of AMQP field value as text.
func TestHeaderText(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	require.Equal(t, map[string]string{
		"s":     "x",
		"b":     "bytes",
		"bin":   "/w==",
		"i":     "42",
		"f":     "1.5",
		"t":     "true",
		"ts":    "2026-01-02T03:04:05Z",
		"nil":   "",
		"table": "map[k:v]",
	}, headers(amqp.Table{
		"s": "x", "b": []byte("bytes"), "bin": []byte{0xff}, "i": int32(42), "f": 1.5,
		"t": true, "ts": at, "nil": nil, "table": amqp.Table{"k": "v"},
	}))
	require.Nil(t, headers(nil))
}

// TestMessageIDKey reads the message-id property, and only that.
func TestMessageIDKey(t *testing.T) {
	t.Parallel()
	d := newDelivery("q", nil, amqp.Delivery{MessageId: "0198c3c9-8e8e-7a36-9a1e-8b2f8c7f4a11"})
	id, err := MessageIDKey(d.tr.Message)
	require.NoError(t, err)
	require.Equal(t, "0198c3c9-8e8e-7a36-9a1e-8b2f8c7f4a11", id)
	_, err = MessageIDKey(newDelivery("q", nil, amqp.Delivery{}).tr.Message)
	require.ErrorIs(t, err, inbox.ErrNoMessageID)
	_, err = MessageIDKey(inbox.Message{Source: inbox.Source{Transport: "sqs", BrokerID: "x"}})
	require.ErrorIs(t, err, inbox.ErrNoMessageID)
}
