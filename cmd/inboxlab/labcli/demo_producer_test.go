package labcli_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// 'inboxlab demo' tells the producer's side by default: the outbox's
// republished events skipped, the new id on retry charged twice; and
// --producer=false leaves it out.
func TestDemoTellsTheProducersSide(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := run(t, nil, "demo", "--json", "--events", "20")
	require.Equal(t, 0, code, stderr)
	var res struct {
		Producer *struct {
			Republished int `json:"republished"`
			Strategies  []struct {
				Name          string `json:"name"`
				Skipped       int    `json:"skipped"`
				DoubleCharged int    `json:"double_charged"`
				BalanceOK     bool   `json:"balance_ok"`
			} `json:"strategies"`
		} `json:"producer"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &res))
	require.NotNil(t, res.Producer)
	require.Len(t, res.Producer.Strategies, 2)
	ob, newID := res.Producer.Strategies[0], res.Producer.Strategies[1]
	require.Equal(t, "outbox", ob.Name)
	require.Positive(t, res.Producer.Republished)
	require.Equal(t, res.Producer.Republished, ob.Skipped)
	require.Zero(t, ob.DoubleCharged)
	require.True(t, ob.BalanceOK)
	require.Equal(t, "new-id-on-retry", newID.Name)
	require.Positive(t, newID.DoubleCharged)

	code, stdout, stderr = run(t, nil, "demo", "--events", "20", "--producer=false")
	require.Equal(t, 0, code, stderr)
	require.NotContains(t, stdout, "new-id-on-retry")
}
