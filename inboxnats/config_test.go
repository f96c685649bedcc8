package inboxnats

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/internal/require"
)

func validConfig() *Config {
	return &Config{Stream: "ORDERS", Durable: "billing", Consumer: "billing", Key: inbox.HeaderKey(HeaderEventID)}
}

// TestConfigValidate: each field's error names it.
func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		adjust func(*Config)
		want   string
	}{
		{"valid", func(*Config) {}, ""},
		{"no stream", func(c *Config) { c.Stream = "" }, "Config.Stream"},
		{"no durable", func(c *Config) { c.Durable = "" }, "Config.Durable"},
		{"no key", func(c *Config) { c.Key = nil }, "Config.Key"},
		{"no consumer", func(c *Config) { c.Consumer = "" }, "Config.Consumer"},
		{"negative workers", func(c *Config) { c.Workers = -1 }, "Config.Workers"},
		{"negative batch", func(c *Config) { c.Batch = -1 }, "Config.Batch"},
		{"ordered with workers", func(c *Config) { c.Ordered, c.Workers = true, 2 }, "Config.Workers must be 1"},
		{"ordered with batch", func(c *Config) { c.Ordered, c.Batch = true, 10 }, "Config.Batch must be 1"},
		{"ordered defaults", func(c *Config) { c.Ordered = true }, ""},
		{"negative max deliver", func(c *Config) { c.MaxDeliver = -1 }, "Config.MaxDeliver"},
		{"backoff cap below base", func(c *Config) { c.RetryBackoff, c.MaxRetryBackoff = time.Minute, time.Second }, "Config.MaxRetryBackoff"},
		{"negative heartbeat", func(c *Config) { c.Heartbeat = -time.Second }, "Config.Heartbeat"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := validConfig()
			tt.adjust(c)
			cfg := c.withDefaults()
			err := cfg.validate()
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.want)
		})
	}
}

// TestConfigResolve covers the defaults and checks taken from the
// JetStream consumer's configuration.
func TestConfigResolve(t *testing.T) {
	t.Parallel()
	explicit := jetstream.ConsumerConfig{AckPolicy: jetstream.AckExplicitPolicy}
	base := validConfig().withDefaults()

	got, err := base.resolve(explicit)
	require.NoError(t, err)
	require.Equal(t, 10*time.Second, got.Heartbeat, "a third of the server's default AckWait")
	require.Equal(t, DefaultMaxDeliver, got.MaxDeliver)

	cc := explicit
	cc.AckWait, cc.MaxDeliver = 9*time.Second, 3
	got, err = base.resolve(cc)
	require.NoError(t, err)
	require.Equal(t, 3*time.Second, got.Heartbeat)
	require.Equal(t, 3, got.MaxDeliver, "the consumer's MaxDeliver")

	cfg := base
	cfg.MaxDeliver = 4
	_, err = cfg.resolve(cc)
	require.ErrorContains(t, err, "exceeds the JetStream consumer's MaxDeliver")

	cfg = base
	cfg.Heartbeat = 9 * time.Second
	_, err = cfg.resolve(cc)
	require.ErrorContains(t, err, "Config.Heartbeat")

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
