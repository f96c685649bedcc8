package labcli_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// 'inboxlab demo --json' prints exactly one JSON object, in the contract's
// form, and nothing else on stdout.
func TestDemoJSON(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := run(t, nil, "demo", "--json", "--events", "20", "--seed", "5")
	require.Equal(t, 0, code, stderr)
	dec := json.NewDecoder(bytes.NewReader([]byte(stdout)))
	dec.DisallowUnknownFields()
	var res struct {
		Events     int    `json:"events"`
		Crashes    int    `json:"crashes"`
		Store      string `json:"store"`
		Transport  string `json:"transport"`
		Strategies []struct {
			Name           string `json:"name"`
			DoubleApplied  int    `json:"double_applied"`
			Lost           int    `json:"lost"`
			WronglySkipped int    `json:"wrongly_skipped"`
			BalanceOK      bool   `json:"balance_ok"`
			BalanceCents   int64  `json:"balance_cents"`
			ExpectedCents  int64  `json:"expected_balance_cents"`
		} `json:"strategies"`
		Producer json.RawMessage `json:"producer"` // see TestDemoTellsTheProducersSide
	}
	require.NoError(t, dec.Decode(&res))
	require.False(t, dec.More(), "exactly one JSON object")
	require.Equal(t, 20, res.Events)
	require.Equal(t, "sqlite", res.Store)
	require.Equal(t, "kafka", res.Transport)
	var names []string
	for _, s := range res.Strategies {
		names = append(names, s.Name)
	}
	require.Equal(t, []string{"none", "offset-key", "payload-hash", "separate-store", "ack-before-commit", "inbox", "watermill-deduplicator"}, names)
	inbox := res.Strategies[5]
	require.Zero(t, inbox.DoubleApplied+inbox.Lost+inbox.WronglySkipped)
	require.True(t, inbox.BalanceOK)
	require.Positive(t, inbox.ExpectedCents)
	require.Equal(t, inbox.ExpectedCents, inbox.BalanceCents)
	for _, s := range res.Strategies {
		require.Equal(t, inbox.ExpectedCents, s.ExpectedCents, "%s: every strategy gets the same events", s.Name)
	}
	none := res.Strategies[0]
	require.Positive(t, none.DoubleApplied)
	require.Greater(t, none.BalanceCents, none.ExpectedCents, "no dedup: the redeliveries credited again")
	wd := res.Strategies[6]
	require.Positive(t, wd.DoubleApplied+wd.Lost, "Watermill's Deduplicator forgets on restart and acks a failed handler's message")
	require.False(t, wd.BalanceOK)
	require.Positive(t, res.Crashes)
}

func TestDemoFlags(t *testing.T) {
	t.Parallel()
	code, _, stderr := run(t, nil, "demo", "--events", "3")
	require.Equal(t, 2, code)
	requireOneLine(t, stderr)
	for _, url := range []string{"mysql://root@127.0.0.1/test", "sqlite:/tmp/demo.db"} {
		code, stdout, stderr := run(t, nil, "demo", "--database-url", url)
		require.Equal(t, 2, code, "a usage mistake: %s", stderr)
		require.Empty(t, stdout)
		requireOneLine(t, stderr)
		require.Contains(t, stderr, "want postgres://")
	}
	code, _, stderr = run(t, nil, "demo", "--brokers", "localhost")
	require.Equal(t, 2, code, stderr)
	requireOneLine(t, stderr)
}

// A database that does not answer is named once, and the demo says once
// what failed: not "demo: demo:", not each connection attempt twice.
func TestDemoUnreachableDatabase(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := run(t, nil, "demo", "--database-url", "postgres://postgres@127.0.0.1:1/test?connect_timeout=2")
	require.Equal(t, 1, code)
	require.Empty(t, stdout)
	requireOneLine(t, stderr)
	require.Contains(t, stderr, "inboxlab demo: cannot reach the database at 127.0.0.1:1/test")
	require.Equal(t, 1, strings.Count(stderr, "connection refused"), "each failure once: %s", stderr)
}
