package demo

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/txinbox/inbox/internal/require"
	"github.com/txinbox/inbox/internal/testdb"
)

// The producer's side, on SQLite and on Postgres: the outbox charges each
// order once although a relay died after Kafka confirmed and the next one
// published the batch again; the producer that mints a new id on retry
// charges each order whose answer it lost twice, inbox or not.
func TestProducerSide(t *testing.T) {
	for _, store := range []string{"sqlite", "postgres"} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			url := ""
			if store == "postgres" {
				url = testdb.URL(t)
			}
			st, err := openStore(ctx, url)
			require.NoError(t, err)
			t.Cleanup(st.close)
			require.NoError(t, st.setup(ctx))
			k, err := newKafka(ctx, "", io.Discard)
			require.NoError(t, err)
			t.Cleanup(k.close)
			res, err := runProducer(ctx, st, k, newScenario(1, 20))
			require.NoError(t, err)

			require.Equal(t, producerOrders, res.Orders)
			require.Equal(t, 1, res.RelayCrashes)
			require.Equal(t, producerOrders/2, res.Republished)
			require.Equal(t, producerOrders/lostAckEvery, res.LostAcks)
			require.Len(t, res.Strategies, 2)
			ob, newID := res.Strategies[0], res.Strategies[1]
			require.Equal(t, "outbox", ob.Name)
			require.Equal(t, producerOrders+res.Republished, ob.Records, "the dead relay's batch went out twice")
			require.Zero(t, ob.DoubleCharged)
			require.Equal(t, res.Republished, ob.Skipped, "the inbox skipped each republished event")
			require.Zero(t, ob.Lost)
			require.True(t, ob.BalanceOK)
			require.Equal(t, "new-id-on-retry", newID.Name)
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
