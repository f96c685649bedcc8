package demo

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox/cmd/inboxlab/internal/broker/brokertest"
	"github.com/txinbox/inbox/internal/testdb"
)

// The producer's side, on SQLite and on Postgres, on Kafka, NATS
// JetStream and the machine's RabbitMQ: the outbox charges each order once
// although a relay died after the broker confirmed and the next one
// published the batch again; the producer that mints a new id on retry
// charges each order whose answer it lost twice, inbox or not. JetStream
// drops the relay's republished events itself (Nats-Msg-Id is the event
// id); elsewhere they arrive and the inbox skips them.
func TestProducerSide(t *testing.T) {
	for _, tc := range []struct{ store, transport string }{
		{"sqlite", TransportKafka}, {"postgres", TransportKafka}, {"sqlite", TransportNATS}, {"sqlite", TransportRabbitMQ},
	} {
		t.Run(tc.store+"/"+tc.transport, func(t *testing.T) {
			t.Parallel()
			if tc.transport == TransportRabbitMQ {
				brokertest.RequireServer(t, "RabbitMQ", DefaultAMQPURL)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			url := ""
			if tc.store == "postgres" {
				url = testdb.URL(t)
			}
			st, err := openStore(ctx, url)
			require.NoError(t, err)
			t.Cleanup(func() { st.close() })
			require.NoError(t, st.setup(ctx))
			b, orders, err := openBroker(ctx, &Config{Transport: tc.transport})
			require.NoError(t, err)
			t.Cleanup(b.Close)
			res, err := runProducer(ctx, st, b, orders, newScenario(1, 20))
			require.NoError(t, err)

			require.Equal(t, producerOrders, res.Orders)
			require.Equal(t, 1, res.RelayCrashes)
			require.Equal(t, producerOrders/2, res.Republished)
			require.Equal(t, producerOrders/lostAckEvery, res.LostAcks)
			require.Len(t, res.Strategies, 2)
			ob, newID := res.Strategies[0], res.Strategies[1]
			require.Equal(t, "outbox", ob.Name)
			if tc.transport == TransportNATS {
				require.Equal(t, producerOrders, ob.Records, "the stream dropped the republished ids")
				require.Zero(t, ob.Skipped)
			} else {
				require.Equal(t, producerOrders+res.Republished, ob.Records, "the dead relay's batch went out twice")
				require.Equal(t, res.Republished, ob.Skipped, "the inbox skipped each republished event")
			}
			require.Zero(t, ob.DoubleCharged)
			require.Zero(t, ob.Lost)
			require.True(t, ob.BalanceOK)
			require.Equal(t, "new-id-on-retry", newID.Name)
			require.Equal(t, producerOrders+res.LostAcks, newID.Records)
			require.Equal(t, res.LostAcks, newID.DoubleCharged, "each lost answer is a second charge")
			require.Zero(t, newID.Lost)
			require.Zero(t, newID.Skipped, "a new id is never skipped")
			require.False(t, newID.BalanceOK)
			require.Greater(t, newID.Cents, newID.WantCents)
		})
	}
}

// Run reports the producer's side when asked.
func TestRunWithProducer(t *testing.T) {
	res := run(t, Config{Events: 20, Producer: true})
	require.NotNil(t, res.Producer)
	require.Zero(t, res.Producer.Strategies[0].DoubleCharged)
	require.Positive(t, res.Producer.Strategies[1].DoubleCharged)
}
