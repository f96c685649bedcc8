package demo

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox/cmd/inboxlab/internal/broker/brokertest"
	"github.com/txinbox/inbox/cmd/inboxlab/internal/child/childtest"
	"github.com/txinbox/inbox/internal/testdb"
)

// consumerEnv makes this test binary an inbox strategy's consumer: one
// consumer life, instead of the tests.
const consumerEnv = "INBOX_DEMO_CONSUMER"

func TestMain(m *testing.M) {
	childtest.Run(consumerEnv, "demo consumer", func(ctx context.Context, args []string) error {
		return RunConsumer(ctx, args, os.Stderr)
	})
	testdb.Main(m)
}

func run(t *testing.T, cfg Config) *Result {
	t.Helper()
	cfg.Command = func(args []string) *exec.Cmd { return childtest.Command(consumerEnv, args) }
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := Run(ctx, cfg)
	require.NoError(t, err)
	return res
}

func byName(res *Result) map[string]StrategyResult {
	m := map[string]StrategyResult{}
	for _, s := range res.Strategies {
		m[s.Name] = s
	}
	return m
}

// requireSeedsStory checks that each strategy shows the failure the seed
// attributes to it, and only the inbox is clean.
func requireSeedsStory(t *testing.T, res *Result) {
	t.Helper()
	s := byName(res)
	require.Len(t, res.Strategies, len(Strategies))
	for i, name := range Strategies {
		require.Equal(t, name, res.Strategies[i].Name)
	}
	require.Equal(t, StrategyResult{Name: "inbox", BalanceOK: true, Cents: s["inbox"].WantCents, WantCents: s["inbox"].WantCents}, s["inbox"])
	require.Positive(t, s["none"].DoubleApplied, "no dedup applies redeliveries again")
	require.Positive(t, s["offset-key"].DoubleApplied, "the republished event has a new offset")
	require.Positive(t, s["payload-hash"].WronglySkipped, "two real events have the same body")
	require.Positive(t, s["separate-store"].DoubleApplied+s["separate-store"].Lost, "the skip is not in the commit")
	require.Positive(t, s["ack-before-commit"].Lost, "offsets committed before the work lose it")
	require.Positive(t, s[StrategyWatermillDeduplicator].Lost, "the Deduplicator acks a failed handler's redelivery")
	require.Positive(t, s[StrategyWatermillDeduplicator].DoubleApplied, "a restart forgets the Deduplicator's keys")
	require.False(t, s[StrategyWatermillDeduplicator].BalanceOK)
	for _, name := range Strategies[:5] {
		require.False(t, s[name].BalanceOK, "%s should end with a wrong balance", name)
	}
	require.Equal(t, 3*len(consumers)*len(Strategies), res.Crashes, "every consumer of every strategy crashed at the three windows")
}

func TestDemoSQLite(t *testing.T) {
	t.Parallel()
	res := run(t, Config{Seed: 1})
	require.Equal(t, "sqlite", res.Store)
	requireSeedsStory(t, res)
	// The same seed gives the same run.
	again := run(t, Config{Seed: 1})
	require.Equal(t, res, again)
}

func TestDemoPostgres(t *testing.T) {
	t.Parallel()
	res := run(t, Config{Seed: 3, Events: 30, DatabaseURL: testdb.URL(t)})
	require.Equal(t, "postgres", res.Store)
	requireSeedsStory(t, res)
}

func TestScenario(t *testing.T) {
	t.Parallel()
	for seed := uint64(1); seed <= 200; seed++ {
		s := newScenario(seed, 20+int(seed%50))
		require.Equal(t, s.events[s.twins[0]].body(), s.events[s.twins[1]].body(), "seed %d: the twins share a body", seed)
		require.NotEqual(t, s.events[s.twins[0]].ID, s.events[s.twins[1]].ID)
		require.Equal(t, s.events[s.republished], s.records[len(s.records)-1])
		batches := map[int]bool{}
		for _, at := range s.crashAt {
			require.NotZero(t, at%batchSize, "seed %d: a crash has work behind it in its batch", seed)
			require.False(t, batches[at/batchSize], "seed %d: one crash per batch", seed)
			batches[at/batchSize] = true
			require.NotContains(t, []int{s.twins[0], s.twins[1], s.republished}, at)
		}
		ids := map[string]bool{}
		for _, e := range s.events {
			require.False(t, ids[e.ID], "seed %d: ids are distinct", seed)
			ids[e.ID] = true
		}
	}
	require.Equal(t, newScenario(9, 40), newScenario(9, 40))
}

// On NATS JetStream, embedded in the test, the story is the same as on
// Kafka: the durables hold at most a batch unacknowledged, so what a crash
// leaves unacknowledged comes back before anything after it, as a group
// restarts from its committed offset.
func TestDemoNATS(t *testing.T) {
	t.Parallel()
	res := run(t, Config{Seed: 1, Transport: TransportNATS})
	require.Equal(t, "nats", res.Transport)
	require.Equal(t, "sqlite", res.Store)
	requireSeedsStory(t, res)
}

// On the machine's RabbitMQ, the inbox is clean and the hand-written
// consumers fail as they do elsewhere; offset-key keys on the delivery
// tag, which starts again on every channel, so it skips events it never
// applied.
func TestDemoRabbitMQ(t *testing.T) {
	t.Parallel()
	brokertest.RequireServer(t, "RabbitMQ", DefaultAMQPURL)
	res := run(t, Config{Seed: 1, Transport: TransportRabbitMQ})
	require.Equal(t, "rabbitmq", res.Transport)
	s := byName(res)
	require.Len(t, res.Strategies, len(Strategies))
	require.Equal(t, StrategyResult{Name: "inbox", BalanceOK: true, Cents: s["inbox"].WantCents, WantCents: s["inbox"].WantCents}, s["inbox"])
	require.Positive(t, s["inbox"].WantCents)
	require.Positive(t, s["none"].DoubleApplied, "no dedup applies redeliveries again")
	require.Positive(t, s["offset-key"].WronglySkipped, "delivery tags start again on a new channel")
	require.Positive(t, s["payload-hash"].WronglySkipped, "two real events have the same body")
	require.Positive(t, s["separate-store"].DoubleApplied+s["separate-store"].Lost, "the skip is not in the commit")
	require.Positive(t, s["ack-before-commit"].Lost, "acks before the work lose it")
	for _, name := range Strategies[:5] {
		require.False(t, s[name].BalanceOK, "%s should end with a wrong balance", name)
	}
	require.Positive(t, res.Crashes)
}

// An unknown transport is refused before anything starts.
func TestDemoUnknownTransport(t *testing.T) {
	t.Parallel()
	_, err := Run(context.Background(), Config{Transport: "kinesis", Command: func([]string) *exec.Cmd { return nil }})
	require.ErrorContains(t, err, `transport "kinesis": want kafka, nats or rabbitmq`)
}
