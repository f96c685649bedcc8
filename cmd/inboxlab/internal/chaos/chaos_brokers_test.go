package chaos

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox/cmd/inboxlab/internal/broker/brokertest"
)

// The NATS run does the same over a JetStream server embedded in the
// coordinator, whose broker fault is a restart on the same store directory.
func TestChaosNATS(t *testing.T) {
	res := run(t, Config{Transport: "nats", Duration: 20 * time.Second, Events: 1000})
	requireExactlyOnce(t, res)
	require.Positive(t, res.BrokerFaults, "the server restarted under the consumers")
}

// The RabbitMQ run does the same over the machine's RabbitMQ, whose broker
// fault closes every consumer connection at once.
func TestChaosRabbitMQ(t *testing.T) {
	brokertest.RequireServer(t, "RabbitMQ", rabbitURL())
	res := run(t, Config{Transport: "rabbitmq", Duration: 20 * time.Second, Events: 1000})
	requireExactlyOnce(t, res)
	require.Positive(t, res.BrokerFaults, "the consumers' connections were closed under them")
}
