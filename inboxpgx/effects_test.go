package inboxpgx_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxmigrate"
	"github.com/txinbox/inbox/inboxtest"
	"github.com/txinbox/inbox/inboxtype"
)

// TestEffectsTextIDs runs the ledger over a store whose ids are text
// (ULIDs here), whose queries cast differently from the uuid store's.
func TestEffectsTextIDs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, _ := newDriver(t, inboxdriver.Tables{IDType: inboxdriver.IDTypeText, Effects: "ledger"})
	c, err := inbox.NewClient(d, &inbox.Config{IDFormat: inbox.IDFormatULID, ReplayHorizon: time.Hour})
	require.NoError(t, err)
	const id = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
	calls := 0
	h := inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, m inbox.Message) error {
		_, err := c.Effect(ctx, m, "capture", func(ctx context.Context, key string) ([]byte, error) {
			calls++
			require.Equal(t, "billing:"+id+":capture", key)
			return []byte("cap_1"), nil
		}, nil)
		return err
	})
	inboxtest.RequireApplied(t)(c.Process(ctx, "billing", inbox.Message{ID: strings.ToLower(id)}, h))
	es, err := c.Admin().EffectList(ctx, inboxtype.EffectListParams{MessageID: strings.ToLower(id)})
	require.NoError(t, err)
	require.Len(t, es, 1)
	require.Equal(t, id, es[0].MessageID)
	require.Equal(t, inboxtype.EffectDone, es[0].State)

	require.NoError(t, c.Admin().Forget(ctx, "billing", id))
	inboxtest.RequireApplied(t)(c.Process(ctx, "billing", inbox.Message{ID: id}, h))
	require.Equal(t, 2, calls)

	require.NoError(t, inboxtest.AgeRows(ctx, d, "billing", nil, 48*time.Hour))
	n, err := c.Admin().Purge(ctx, inbox.PurgeParams{OlderThan: 24 * time.Hour})
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	es, err = c.Admin().EffectList(ctx, inboxtype.EffectListParams{})
	require.NoError(t, err)
	require.Empty(t, es, "ledger entries after the purge")
}

// TestMigrateEffectsDownAndUp reverts migration 003 (and the later ones)
// and applies it again.
func TestMigrateEffectsDownAndUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, _ := newDriver(t, inboxdriver.Tables{})
	m, err := inboxmigrate.New(d)
	require.NoError(t, err)
	down, err := m.Down(ctx, 2)
	require.NoError(t, err)
	require.Equal(t, []inboxmigrate.Info{{Version: 7, Name: "outbox_key_heads"}, {Version: 6, Name: "outbox"}, {Version: 5, Name: "dead_letter_replay"}, {Version: 4, Name: "takeovers"}, {Version: 3, Name: "effects"}}, down)
	_, err = d.EffectList(ctx, &inboxtype.EffectListParams{Limit: 1})
	require.Error(t, err, "the ledger table should be gone")
	up, err := m.Up(ctx)
	require.NoError(t, err)
	require.Equal(t, []inboxmigrate.Info{{Version: 3, Name: "effects", Applied: true}, {Version: 4, Name: "takeovers", Applied: true},
		{Version: 5, Name: "dead_letter_replay", Applied: true}, {Version: 6, Name: "outbox", Applied: true},
		{Version: 7, Name: "outbox_key_heads", Applied: true}}, up)
	es, err := d.EffectList(ctx, &inboxtype.EffectListParams{Limit: 1})
	require.NoError(t, err)
	require.Empty(t, es)
}
