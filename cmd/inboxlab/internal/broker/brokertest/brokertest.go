// Package brokertest holds the lab's test helpers for real brokers.
package brokertest

import (
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/txinbox/inbox/cmd/inboxlab/internal/broker"
	"github.com/txinbox/inbox/internal/testdb"
)

// RequireServer skips the test, or fails it in CI, when the broker at
// rawURL (amqp://…, nats://…) does not answer.
func RequireServer(t testing.TB, what, rawURL string) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err == nil {
		var conn net.Conn
		if conn, err = net.DialTimeout("tcp", u.Host, 3*time.Second); err == nil {
			conn.Close()
		}
	}
	testdb.Require(t, what+" at "+broker.Redacted(rawURL), err)
}
