package inboxnats

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxtransport/transporttest"
	"github.com/txinbox/inbox/outbox"
)

func validConfig() *Config {
	return &Config{Stream: "ORDERS", Durable: "billing", Consumer: "billing", Key: inbox.HeaderKey(outbox.HeaderEventID)}
}

// TestConfigValidate: each field's error names it.
func TestConfigValidate(t *testing.T) {
	t.Parallel()
	transporttest.CheckConfig(t, validConfig, func(c *Config) error {
		cfg := c.withDefaults()
		return cfg.validate()
	}, []transporttest.ConfigCase[Config]{
		{Name: "valid", Adjust: func(*Config) {}, Want: ""},
		{Name: "no stream", Adjust: func(c *Config) { c.Stream = "" }, Want: "Config.Stream"},
		{Name: "no durable", Adjust: func(c *Config) { c.Durable = "" }, Want: "Config.Durable"},
		{Name: "no key", Adjust: func(c *Config) { c.Key = nil }, Want: "Config.Key"},
		{Name: "no consumer", Adjust: func(c *Config) { c.Consumer = "" }, Want: "Config.Consumer"},
		{Name: "a shared knob", Adjust: func(c *Config) { c.Workers = -1 }, Want: "inboxnats: Config.Workers"},
		{Name: "ordered with workers", Adjust: func(c *Config) { c.Ordered, c.Workers = true, 2 }, Want: "Config.Workers must be 1"},
		{Name: "ordered with batch", Adjust: func(c *Config) { c.Ordered, c.MaxBatch = true, 10 }, Want: "Config.MaxBatch must be 1"},
		{Name: "ordered defaults", Adjust: func(c *Config) { c.Ordered = true }, Want: ""},
		{Name: "negative heartbeat", Adjust: func(c *Config) { c.HeartbeatInterval = -time.Second }, Want: "Config.HeartbeatInterval"},
	})
}

// TestConfigResolve covers the defaults and checks taken from the
// JetStream consumer's configuration.
func TestConfigResolve(t *testing.T) {
	t.Parallel()
	explicit := jetstream.ConsumerConfig{AckPolicy: jetstream.AckExplicitPolicy}
	base := validConfig().withDefaults()

	got, err := base.resolve(explicit)
	require.NoError(t, err)
	require.Equal(t, 10*time.Second, got.HeartbeatInterval, "a third of the server's default AckWait")
	require.Equal(t, DefaultMaxDeliveries, got.MaxDeliveries)

	cc := explicit
	cc.AckWait, cc.MaxDeliver = 9*time.Second, 3
	got, err = base.resolve(cc)
	require.NoError(t, err)
	require.Equal(t, 3*time.Second, got.HeartbeatInterval)
	require.Equal(t, 3, got.MaxDeliveries, "at most the consumer's MaxDeliver")

	cfg := base
	cfg.MaxDeliveries = 4
	_, err = cfg.resolve(cc)
	require.ErrorContains(t, err, "exceeds the JetStream consumer's MaxDeliver")

	cfg = base
	cfg.HeartbeatInterval = 9 * time.Second
	_, err = cfg.resolve(cc)
	require.ErrorContains(t, err, "Config.HeartbeatInterval")

	for _, p := range []jetstream.AckPolicy{jetstream.AckNonePolicy, jetstream.AckAllPolicy} {
		cc := explicit
		cc.AckPolicy = p
		_, err = base.resolve(cc)
		require.ErrorContains(t, err, "AckExplicitPolicy")
	}

	push := explicit
	push.DeliverSubject = "deliver.here"
	_, err = base.resolve(push)
	require.ErrorContains(t, err, "push consumer")

	ordered := validConfig()
	ordered.Ordered = true
	cfg = ordered.withDefaults()
	cc = explicit
	cc.MaxAckPending = 0 // the server's default, 1000
	_, err = cfg.resolve(cc)
	require.ErrorContains(t, err, "MaxAckPending 1")
	cc.MaxAckPending = 1
	_, err = cfg.resolve(cc)
	require.NoError(t, err)
}
