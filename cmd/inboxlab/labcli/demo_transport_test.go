package labcli_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// 'inboxlab demo --transport nats' runs the story on an embedded JetStream
// server, through this binary's demo-consumer processes, and only the
// inbox is clean.
func TestDemoTransportNATS(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := run(t, nil, "demo", "--transport", "nats", "--json", "--events", "20", "--seed", "5")
	require.Equal(t, 0, code, stderr)
	var res struct {
		Transport  string `json:"transport"`
		Strategies []struct {
			Name           string `json:"name"`
			DoubleApplied  int    `json:"double_applied"`
			Lost           int    `json:"lost"`
			WronglySkipped int    `json:"wrongly_skipped"`
			BalanceOK      bool   `json:"balance_ok"`
		} `json:"strategies"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &res))
	require.Equal(t, "nats", res.Transport)
	require.Len(t, res.Strategies, 7)
	inbox := res.Strategies[5]
	require.Equal(t, "inbox", inbox.Name)
	require.Zero(t, inbox.DoubleApplied+inbox.Lost+inbox.WronglySkipped)
	require.True(t, inbox.BalanceOK)
	require.Equal(t, "none", res.Strategies[0].Name)
	require.Positive(t, res.Strategies[0].DoubleApplied)
}

// A transport the demo does not know, or a broker flag of another
// transport, is a usage mistake: exit 2, one line, nothing started.
func TestDemoTransportFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--transport", "kinesis"}, `--transport "kinesis": want kafka, nats or rabbitmq`},
		{[]string{"--transport", "nats", "--brokers", "127.0.0.1:9092"}, "--brokers is for --transport kafka, not nats"},
		{[]string{"--nats-url", "nats://127.0.0.1:4222"}, "--nats-url is for --transport nats, not kafka"},
		{[]string{"--transport", "nats", "--amqp-url", "amqp://127.0.0.1/"}, "--amqp-url is for --transport rabbitmq, not nats"},
		{[]string{"--transport", "nats", "--nats-url", "localhost"}, `--nats-url "localhost": want nats://host:port`},
		{[]string{"--transport", "rabbitmq", "--amqp-url", "http://127.0.0.1/"}, "--amqp-url"},
	} {
		code, stdout, stderr := run(t, nil, append([]string{"demo"}, tc.args...)...)
		require.Equal(t, 2, code, "%v: %s", tc.args, stderr)
		require.Empty(t, stdout)
		requireOneLine(t, stderr)
		require.Contains(t, stderr, tc.want, "%v", tc.args)
	}
}

// A RabbitMQ that does not answer is named, without its password.
func TestDemoTransportRabbitMQUnreachable(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := run(t, nil, "demo", "--transport", "rabbitmq", "--amqp-url", "amqp://guest:hunter2@127.0.0.1:1/")
	require.Equal(t, 1, code, stderr)
	require.Empty(t, stdout)
	requireOneLine(t, stderr)
	require.Contains(t, stderr, "cannot reach RabbitMQ at amqp://guest:xxxxx@127.0.0.1:1/")
	require.NotContains(t, stderr, "hunter2")
}
