package testdb

import "os"

// The brokers of the transport adapters' tests: the server an environment
// variable names, or the machine's. A test that cannot reach one calls
// Require, which skips it (fails it in CI).
const (
	// DefaultNATSURL is the machine's NATS server, with JetStream.
	DefaultNATSURL = "nats://127.0.0.1:4222"
	// DefaultAMQPURL is the machine's RabbitMQ.
	DefaultAMQPURL = "amqp://guest:guest@127.0.0.1:5672/"
)

// NATSURL returns the URL of the test NATS server: TEST_NATS_URL, or
// DefaultNATSURL.
func NATSURL() string { return envOr("TEST_NATS_URL", DefaultNATSURL) }

// AMQPURL returns the URL of the test RabbitMQ: TEST_AMQP_URL, or
// DefaultAMQPURL.
func AMQPURL() string { return envOr("TEST_AMQP_URL", DefaultAMQPURL) }

// envOr returns the environment variable name, or def when it is unset or
// empty.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
