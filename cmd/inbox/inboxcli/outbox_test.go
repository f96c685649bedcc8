package inboxcli_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox/internal/testdb"
	"github.com/txinbox/inbox/outbox"
)

// The outbox commands show and repair the outbox, and 'inbox relay'
// publishes it to Kafka (kfake), with the event id in each record's
// event-id header.
func TestOutboxAndRelay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, schema := migratedPgx(t)
	o, err := outbox.New(d, nil)
	require.NoError(t, err)
	ids, err := o.Enqueue(ctx,
		outbox.Message{Topic: "orders", Key: []byte("acct-1"), Payload: []byte(`{"n":1}`)},
		outbox.Message{Topic: "orders", Key: []byte("acct-2"), Payload: []byte(`{"n":2}`)},
		outbox.Message{Topic: "orders", Payload: []byte(`{"n":3}`)})
	require.NoError(t, err)
	env := map[string]string{"DATABASE_URL": testdb.URL(t)}
	with := func(args ...string) []string { return append(args, "--schema", schema) }

	code, out, errOut := run(t, env, with("outbox", "stats", "--json")...)
	require.Equal(t, 0, code, errOut)
	var st struct {
		Pending, Parked int64
	}
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	require.Equal(t, int64(3), st.Pending)

	code, out, errOut = run(t, env, with("outbox", "park", ids[1])...)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "parked")
	code, _, errOut = run(t, env, with("outbox", "park", ids[1])...)
	require.Equal(t, 1, code, "parking a parked event")
	requireOneLine(t, errOut)
	code, out, errOut = run(t, env, with("outbox", "list", "--state", "parked")...)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, ids[1])
	require.NotContains(t, out, ids[0])
	code, out, errOut = run(t, env, with("outbox", "show", ids[1], "--json")...)
	require.Equal(t, 0, code, errOut)
	var row struct {
		ID, Key, State, Payload string
	}
	require.NoError(t, json.Unmarshal([]byte(out), &row))
	require.Equal(t, ids[1], row.ID)
	require.Equal(t, "acct-2", row.Key)
	require.Equal(t, "parked", row.State)
	require.Equal(t, `{"n":2}`, row.Payload)
	code, _, errOut = run(t, env, with("outbox", "show", "not-an-id")...)
	require.Equal(t, 2, code)
	requireOneLine(t, errOut)

	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	brokers := cluster.ListenAddrs()[0]
	code, out, errOut = run(t, env, with("relay", "--brokers", brokers, "--once")...)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "published 2 events")
	require.Contains(t, out, "1 event is parked, waiting for an operator")
	code, _, errOut = run(t, env, with("outbox", "unpark", ids[1])...)
	require.Equal(t, 0, code, errOut)
	code, out, errOut = run(t, env, with("relay", "--brokers", brokers, "--once")...)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "published 1 event in")
	code, out, errOut = run(t, env, with("outbox", "stats")...)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "pending    0")

	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers), kgo.ConsumeTopics("orders"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	got := map[string]string{}
	deadline := time.Now().Add(30 * time.Second)
	for len(got) < 3 && time.Now().Before(deadline) {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		fetches := cl.PollFetches(pctx)
		cancel()
		fetches.EachRecord(func(r *kgo.Record) {
			for _, h := range r.Headers {
				if h.Key == outbox.HeaderEventID {
					got[string(h.Value)] = string(r.Value)
				}
			}
		})
	}
	require.Equal(t, map[string]string{ids[0]: `{"n":1}`, ids[1]: `{"n":2}`, ids[2]: `{"n":3}`}, got)

	code, _, errOut = run(t, env, "relay", "--once")
	require.Equal(t, 2, code)
	requireOneLine(t, errOut)
}
