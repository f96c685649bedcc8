package inboxcli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/cmd/inbox/inboxcli"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxtest"
	"github.com/txinbox/inbox/internal/testdb"
)

// TestStatsListsStuckEffects checks that 'inbox stats' lists the steps
// started before --stuck-after and never done, and no others.
func TestStatsListsStuckEffects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, schema := migratedPgx(t)

	now := time.Now()
	stuckID, freshID, doneID := inboxtest.NewID(), inboxtest.NewID(), inboxtest.NewID()
	begin := func(id, step string, at time.Time) {
		_, started, err := d.EffectBegin(ctx, &inboxdriver.EffectBeginParams{
			EffectKeyParams: inboxdriver.EffectKeyParams{Consumer: "billing", ID: id, Step: step}, Now: at})
		require.NoError(t, err)
		require.True(t, started)
	}
	begin(stuckID, "capture", now.Add(-time.Hour))
	begin(freshID, "capture", now)
	begin(doneID, "capture", now.Add(-time.Hour))
	ok, err := d.EffectDone(ctx, &inboxdriver.EffectDoneParams{
		EffectKeyParams: inboxdriver.EffectKeyParams{Consumer: "billing", ID: doneID, Step: "capture"}, Now: now})
	require.NoError(t, err)
	require.True(t, ok)
	c, err := inbox.NewClient(d, nil)
	require.NoError(t, err)
	inboxtest.RequireApplied(t)(c.Process(ctx, "billing", inbox.Message{ID: inboxtest.NewID()},
		inbox.HandlerFunc[pgx.Tx](func(context.Context, pgx.Tx, inbox.Message) error { return nil })))

	run := func(args ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		args = append(args, "--database-url", testdb.URL(t), "--schema", schema)
		code := inboxcli.Main(ctx, args, &inboxcli.Env{Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }})
		require.Equal(t, 0, code, "exit status; stderr: %s", stderr.String())
		return stdout.String()
	}

	text := run("stats", "--stuck-after", "5m")
	require.Contains(t, text, "remote effects started over 5m ago and never done: 1")
	require.Contains(t, text, stuckID)
	require.NotContains(t, text, freshID)
	require.NotContains(t, text, doneID)

	var out struct {
		StuckAfterSecs float64 `json:"stuck_after_s"`
		StuckEffects   []struct {
			Consumer  string `json:"consumer"`
			MessageID string `json:"message_id"`
			Step      string `json:"step"`
			Attempts  int    `json:"attempts"`
		} `json:"stuck_effects"`
		StuckEffectsError string `json:"stuck_effects_error"`
	}
	require.NoError(t, json.Unmarshal([]byte(run("stats", "--json", "--stuck-after", "30s")), &out))
	require.Empty(t, out.StuckEffectsError)
	require.Equal(t, 30.0, out.StuckAfterSecs)
	require.Len(t, out.StuckEffects, 1)
	require.Equal(t, stuckID, out.StuckEffects[0].MessageID)
	require.Equal(t, "capture", out.StuckEffects[0].Step)
	require.Equal(t, 1, out.StuckEffects[0].Attempts)

	// Two hours back, nothing is stuck yet.
	text = run("stats", "--stuck-after", "2h")
	require.True(t, strings.Contains(text, "never done: none"), text)
}
