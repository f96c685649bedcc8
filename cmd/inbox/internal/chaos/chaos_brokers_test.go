package chaos

import (
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/txinbox/inbox/internal/require"
	"github.com/txinbox/inbox/internal/testdb"
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
	u, err := url.Parse(rabbitURL())
	require.NoError(t, err)
	conn, err := net.DialTimeout("tcp", u.Host, 3*time.Second)
	testdb.Require(t, "RabbitMQ at "+u.Host, err)
	conn.Close()
	res := run(t, Config{Transport: "rabbitmq", Duration: 20 * time.Second, Events: 1000})
	requireExactlyOnce(t, res)
	require.Positive(t, res.BrokerFaults, "the consumers' connections were closed under them")
}
