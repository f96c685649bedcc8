package bench

import (
	"context"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox/outbox"
)

// The drain rows run alone when --rows names only them: the ordered ones
// at each backlog, the unordered ones at the largest, each to the null
// sink and to kfake, with the two targets of the ordered relay; the
// drains' schema is dropped at the end.
func TestDrainRows(t *testing.T) {
	t.Parallel()
	var drains []string
	for _, d := range drainRows {
		drains = append(drains, d.name)
	}
	cfg := small(t, drains...)
	cfg.RelayBacklogs = []int{1200, 300}
	cfg.RelayRounds = 2
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg)
	require.NoError(t, err)
	require.Empty(t, rep.Results)
	require.Nil(t, rep.Outbox)
	rl := rep.Relay
	require.NotNil(t, rl)
	require.Equal(t, []int{300, 1200}, rl.Backlogs)
	require.Equal(t, 4, rl.Keys)
	require.Equal(t, 2, rl.Rounds)
	var got []string
	for _, d := range rl.Drains {
		got = append(got, d.Name+"@"+strconv.Itoa(d.Events))
		require.Positive(t, d.MsgsPerS, "%s at %d", d.Name, d.Events)
		require.Len(t, d.RoundRates, 2)
	}
	require.Equal(t, []string{
		"relay-ordered-4-keys-null@300", "relay-ordered-4-keys-null@1200", "relay-unordered-null@1200",
		"relay-ordered-4-keys-kfake@300", "relay-ordered-4-keys-kfake@1200", "relay-unordered-kfake@1200",
	}, got)
	var targets []string
	for _, r := range rep.Targets {
		if strings.Contains(r.Name, "ordered relay") && !r.ReportOnly {
			targets = append(targets, r.Name)
			require.Positive(t, r.Value)
		}
	}
	require.Equal(t, []string{
		"ordered relay, 4 keys, to the null sink: msgs/s at a backlog of 1200 ÷ at 300 (≥ 0.8: cost linear in the backlog)",
		"ordered relay, 4 keys ÷ unordered relay, to the null sink: msgs/s at a backlog of 1200 (≥ 0.5)",
	}, targets)

	conn, err := pgx.Connect(ctx, cfg.DatabaseURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var n int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, rep.Settings.Schema+"_relay").Scan(&n))
	require.Zero(t, n, "the drains' schema was not dropped")
}

// A backlog is enqueued as the outbox's enqueue writes it: in ordered
// mode each key's events are numbered from 1 with no gap; unordered, none
// is.
func TestRelayStoreFill(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := small(t, "bare")
	require.NoError(t, cfg.validate())
	b := &bench{cfg: cfg, log: io.Discard, start: time.Now(), maxW: 1, opened: map[*resource]bool{}}
	defer b.close()
	require.NoError(t, b.connect(ctx))
	s, closeStore, err := b.openRelayStore(ctx)
	require.NoError(t, err)
	defer closeStore()

	require.NoError(t, s.fill(ctx, 2*relayEnqueueBatch+10, true))
	rows, err := s.pool.Query(ctx, `SELECT convert_from(msg_key, 'UTF8'), count(*), min(key_seq), max(key_seq),
       bool_and(key_seq IS NOT NULL), count(DISTINCT key_seq)
  FROM `+s.outbox+` GROUP BY 1 ORDER BY 1`)
	require.NoError(t, err)
	type keyRow struct {
		Key         string
		N, Min, Max int64
		Ordered     bool
		Distinct    int64
	}
	keys, err := pgx.CollectRows(rows, pgx.RowToStructByPos[keyRow])
	require.NoError(t, err)
	require.Len(t, keys, relayKeys)
	total := int64(0)
	for _, k := range keys {
		require.True(t, k.Ordered, "%s", k.Key)
		require.Equal(t, int64(1), k.Min, "%s", k.Key)
		require.Equal(t, k.N, k.Max, "%s: numbered with no gap", k.Key)
		require.Equal(t, k.N, k.Distinct, "%s", k.Key)
		total += k.N
	}
	require.Equal(t, int64(2*relayEnqueueBatch+10), total)
	// The next fill starts from an empty outbox, and unordered rows have
	// no sequence number.
	require.NoError(t, s.fill(ctx, 500, false))
	var n, numbered int
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT count(*), count(key_seq) FROM `+s.outbox).Scan(&n, &numbered))
	require.Equal(t, 500, n)
	require.Zero(t, numbered)
}

// The targets of the drain rows compare the rows round by round, and
// leave out what the report has no drain for.
func TestRelayTargets(t *testing.T) {
	t.Parallel()
	drain := func(name string, events int, rates ...float64) Drain {
		return Drain{Name: name, Events: events, MsgsPerS: median(rates), RoundRates: rates}
	}
	rep := &Report{Relay: &RelayResult{Keys: 4, Backlogs: []int{10, 100}, Drains: []Drain{
		drain("relay-ordered-4-keys-null", 10, 100, 200, 100),
		drain("relay-ordered-4-keys-null", 100, 90, 140, 70),
		drain("relay-unordered-null", 100, 200, 200, 100),
		drain("relay-ordered-4-keys-kfake", 10, 50),
	}}}
	got := targetsByName(rep)
	requireTarget(t, got, "ordered relay, 4 keys, to the null sink: msgs/s at a backlog of 100 ÷ at 10 (≥ 0.8: cost linear in the backlog)",
		0.7, false, "round by round: 0.9, 0.7, 0.7")
	requireTarget(t, got, "ordered relay, 4 keys ÷ unordered relay, to the null sink: msgs/s at a backlog of 100 (≥ 0.5)",
		0.7, true, "round by round: 0.45, 0.7, 0.7")
	require.Len(t, got, 2, "no kfake drain at 100, no kfake ratio: %v", got)
}

// The count of a drain passes on the capability of the sink it counts,
// so that the relay gives an order-keeping sink a key's run in one call.
func TestCountSinkKeepsTheSinksKeyOrder(t *testing.T) {
	t.Parallel()
	require.True(t, newCountSink(&outbox.MemorySink{Discard: true}, 1).KeepsKeyOrder())
	plain := outbox.SinkFunc(func(_ context.Context, recs []outbox.Record) []error { return make([]error, len(recs)) })
	require.False(t, newCountSink(plain, 1).KeepsKeyOrder())
}
