package inboxkafka_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxkafka"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/inboxpgx/inboxpgxtest"
)

// unreachable is a seed broker that nothing listens on: the clients of
// these tests are built and closed, never used.
const unreachable = "127.0.0.1:1"

func inboxClient(t *testing.T) *inbox.Client[pgx.Tx] {
	t.Helper()
	driver, err := inboxpgx.New(inboxpgxtest.Pool(t), &inboxpgx.Config{Tables: inboxdriver.Tables{Schema: "unused"}})
	require.NoError(t, err)
	client, err := inbox.NewClient[pgx.Tx](driver, nil)
	require.NoError(t, err)
	return client
}

func nopHandler() inbox.Handler[pgx.Tx] {
	return inbox.HandlerFunc[pgx.Tx](func(context.Context, pgx.Tx, inbox.Message) error { return nil })
}

// TestNewRefusesUnsafeClients: New refuses a client that could commit an
// offset behind the consumer's back, and the error names the option.
func TestNewRefusesUnsafeClients(t *testing.T) {
	t.Parallel()
	client := inboxClient(t)
	base := []kgo.Opt{kgo.SeedBrokers(unreachable), kgo.ConsumeTopics("orders")}
	withOpts := func(opts ...kgo.Opt) []kgo.Opt { return append(append([]kgo.Opt{}, base...), opts...) }
	for _, tc := range []struct {
		name string
		opts []kgo.Opt
		cfg  func(*inboxkafka.Config)
		want string
	}{
		{name: "no group", opts: withOpts(), want: "kgo.ConsumerGroup"},
		{name: "auto-commit", opts: withOpts(kgo.ConsumerGroup("g"), kgo.BlockRebalanceOnPoll()), want: "kgo.DisableAutoCommit"},
		{name: "greedy auto-commit", opts: withOpts(kgo.ConsumerGroup("g"), kgo.GreedyAutoCommit(), kgo.BlockRebalanceOnPoll()), want: "kgo.DisableAutoCommit"},
		{name: "rebalance not blocked", opts: withOpts(kgo.ConsumerGroup("g"), kgo.DisableAutoCommit()), want: "kgo.BlockRebalanceOnPoll"},
		{name: "no ClientOpts", opts: withOpts(kgo.ConsumerGroup("g"), kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll()), want: "inboxkafka.ClientOpts()"},
		{name: "ClientOpts twice", opts: withOpts(append(append(inboxkafka.ClientOpts(), inboxkafka.ClientOpts()...), kgo.ConsumerGroup("g"))...), want: "more than once"},
		{name: "dead-letter topic consumed", opts: withOpts(append(inboxkafka.ClientOpts(), kgo.ConsumerGroup("g"))...),
			cfg: func(c *inboxkafka.Config) { c.DeadLetterTopic = "orders" }, want: "Config.DeadLetterTopic"},
		{name: "no consumer name", opts: withOpts(append(inboxkafka.ClientOpts(), kgo.ConsumerGroup("g"))...),
			cfg: func(c *inboxkafka.Config) { c.Consumer = "" }, want: "Config.Consumer is required"},
		{name: "bad consumer name", opts: withOpts(append(inboxkafka.ClientOpts(), kgo.ConsumerGroup("g"))...),
			cfg: func(c *inboxkafka.Config) { c.Consumer = " billing" }, want: "Config.Consumer"},
		{name: "no key", opts: withOpts(append(inboxkafka.ClientOpts(), kgo.ConsumerGroup("g"))...),
			cfg: func(c *inboxkafka.Config) { c.Key = nil }, want: "Config.Key is required"},
		{name: "buffer smaller than batch", opts: withOpts(append(inboxkafka.ClientOpts(), kgo.ConsumerGroup("g"))...),
			cfg: func(c *inboxkafka.Config) { c.MaxBatch, c.MaxBuffered = 100, 10 }, want: "Config.MaxBuffered"},
		{name: "a shared knob", opts: withOpts(append(inboxkafka.ClientOpts(), kgo.ConsumerGroup("g"))...),
			cfg: func(c *inboxkafka.Config) { c.MaxBatch = -1 }, want: "inboxkafka: Config.MaxBatch"},
		{name: "workers", opts: withOpts(append(inboxkafka.ClientOpts(), kgo.ConsumerGroup("g"))...),
			cfg: func(c *inboxkafka.Config) { c.Workers = 4 }, want: "Config.Workers must be 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl, err := kgo.NewClient(tc.opts...)
			require.NoError(t, err)
			defer cl.Close()
			cfg := inboxkafka.Config{Consumer: "billing", Key: inbox.HeaderKey("event-id")}
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			c, err := inboxkafka.New(cl, client, nopHandler(), &cfg)
			require.ErrorContains(t, err, tc.want)
			require.Nil(t, c)
		})
	}
}

// TestNewAcceptsClientOpts: a client built with ClientOpts and a group is
// accepted; its options are the safe ones.
func TestNewAcceptsClientOpts(t *testing.T) {
	t.Parallel()
	client := inboxClient(t)
	cl, err := kgo.NewClient(append(inboxkafka.ClientOpts(), kgo.SeedBrokers(unreachable), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("orders"))...)
	require.NoError(t, err)
	defer cl.Close()
	require.Equal(t, true, cl.OptValue(kgo.DisableAutoCommit))
	require.Equal(t, true, cl.OptValue(kgo.BlockRebalanceOnPoll))
	c, err := inboxkafka.New(cl, client, nopHandler(), &inboxkafka.Config{Consumer: "billing", Key: inbox.HeaderKey("event-id")})
	require.NoError(t, err)
	require.NotNil(t, c)
	require.Equal(t, inboxkafka.DefaultMaxBatch, c.Config().MaxBatch, "Config has the defaults applied")
	require.Equal(t, inboxkafka.DefaultShutdownTimeout, c.Config().ShutdownTimeout)
	require.Equal(t, "billing", c.Config().Consumer)

	_, err = inboxkafka.New(nil, client, nopHandler(), &inboxkafka.Config{Consumer: "billing", Key: inbox.HeaderKey("event-id")})
	require.ErrorContains(t, err, "kgo client is nil")
	_, err = inboxkafka.New(cl, nil, nopHandler(), &inboxkafka.Config{Consumer: "billing", Key: inbox.HeaderKey("event-id")})
	require.ErrorContains(t, err, "inbox client is nil")
	_, err = inboxkafka.New(cl, client, nil, &inboxkafka.Config{Consumer: "billing", Key: inbox.HeaderKey("event-id")})
	require.ErrorContains(t, err, "handler is nil")
	_, err = inboxkafka.New(cl, client, nopHandler(), nil)
	require.ErrorContains(t, err, "Config.Consumer is required")
}

// TestClientOptsForOneClient: the options of one ClientOpts call tie one
// client to one consumer.
func TestClientOptsForOneClient(t *testing.T) {
	t.Parallel()
	client := inboxClient(t)
	opts := append(inboxkafka.ClientOpts(), kgo.SeedBrokers(unreachable), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("orders"))
	cl1, err := kgo.NewClient(opts...)
	require.NoError(t, err)
	defer cl1.Close()
	cl2, err := kgo.NewClient(opts...)
	require.NoError(t, err)
	defer cl2.Close()
	cfg := &inboxkafka.Config{Consumer: "billing", Key: inbox.HeaderKey("event-id")}
	_, err = inboxkafka.New(cl1, client, nopHandler(), cfg)
	require.ErrorContains(t, err, "more than one client")
}
