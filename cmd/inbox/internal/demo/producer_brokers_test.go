package demo

import (
	"context"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/txinbox/inbox/internal/require"
	"github.com/txinbox/inbox/internal/testdb"
)

// The producer's side on NATS JetStream (embedded) and on the machine's
// RabbitMQ: the outbox charges each order once, the new id on retry twice.
// JetStream drops the relay's republished events itself (Nats-Msg-Id is
// the event id); on RabbitMQ they arrive and the inbox skips them.
func TestProducerSideOnBrokers(t *testing.T) {
	for _, transport := range []string{TransportNATS, TransportRabbitMQ} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if transport == TransportRabbitMQ {
				u, err := url.Parse(DefaultAMQPURL)
				require.NoError(t, err)
				conn, err := net.DialTimeout("tcp", u.Host, 3*time.Second)
				if err == nil {
					conn.Close()
				}
				testdb.Require(t, "RabbitMQ at "+u.Host, err)
			}
			st, err := openStore(ctx, "")
			require.NoError(t, err)
			t.Cleanup(st.close)
			require.NoError(t, st.setup(ctx))
			b, err := newBroker(ctx, &Config{Transport: transport})
			require.NoError(t, err)
			t.Cleanup(b.close)
			res, err := runProducer(ctx, st, b, newScenario(1, 20))
			require.NoError(t, err)

			require.Equal(t, producerOrders/2, res.Republished)
			ob, newID := res.Strategies[0], res.Strategies[1]
			require.Equal(t, "outbox", ob.Name)
			require.Zero(t, ob.DoubleCharged)
			require.Zero(t, ob.Lost)
			require.True(t, ob.BalanceOK)
			if transport == TransportNATS {
				require.Equal(t, producerOrders, ob.Records, "the stream dropped the republished ids")
				require.Zero(t, ob.Skipped)
			} else {
				require.Equal(t, producerOrders+res.Republished, ob.Records)
				require.Equal(t, res.Republished, ob.Skipped, "the inbox skipped each republished event")
			}
			require.Equal(t, res.LostAcks, newID.DoubleCharged, "each lost answer is a second charge")
			require.False(t, newID.BalanceOK)
		})
	}
}
