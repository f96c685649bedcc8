package inboxpgx_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxmigrate"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/inboxtest"
	"github.com/txinbox/inbox/internal/testdb"
)

type ctxKey struct{}

// recorder is an Observer that keeps what it is told.
type recorder struct {
	mu   sync.Mutex
	txs  []inbox.TxEvent
	dead []inbox.DeadLetterEvent
	ctx  []bool
}

func (r *recorder) TxStart(ctx context.Context, consumer string, msgs []inbox.Message) context.Context {
	return context.WithValue(ctx, ctxKey{}, len(msgs))
}

func (r *recorder) TxEnd(ctx context.Context, e *inbox.TxEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.txs = append(r.txs, *e)
	r.ctx = append(r.ctx, ctx.Value(ctxKey{}) == e.Messages)
}

func (r *recorder) DeadLettered(ctx context.Context, e *inbox.DeadLetterEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dead = append(r.dead, *e)
}

func TestObserver(t *testing.T) {
	t.Parallel()
	schema := testdb.Schema(t)
	d, err := inboxpgx.New(testPool(t), &inboxpgx.Config{Tables: inboxdriver.Tables{Schema: schema}})
	require.NoError(t, err)
	m, err := inboxmigrate.New(d)
	require.NoError(t, err)
	_, err = m.Up(context.Background())
	require.NoError(t, err)
	rec := &recorder{}
	c, err := inbox.NewClient(d, &inbox.Config{Observer: rec})
	require.NoError(t, err)
	ctx := context.Background()
	var handlerSawCtx bool
	ok := inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
		handlerSawCtx = ctx.Value(ctxKey{}) != nil
		return nil
	})
	boom := errors.New("boom")
	failing := inbox.HandlerFunc[pgx.Tx](func(context.Context, pgx.Tx, inbox.Message) error { return boom })

	id := inboxtest.NewID()
	inboxtest.RequireApplied(t)(c.Process(ctx, "billing", inbox.Message{ID: id}, ok))
	require.True(t, handlerSawCtx, "the handler runs under the context TxStart returned")
	inboxtest.RequireDuplicate(t)(c.Process(ctx, "billing", inbox.Message{ID: id}, ok))
	_, err = c.Process(ctx, "billing", inbox.Message{ID: inboxtest.NewID()}, failing)
	require.ErrorIs(t, err, boom)
	_, err = c.ProcessBatch(ctx, "billing", []inbox.Message{{ID: id}, {ID: inboxtest.NewID()}, {ID: inboxtest.NewID()}}, ok)
	require.NoError(t, err)
	require.NoError(t, c.DeadLetter(ctx, inbox.DeadLetterParams{Consumer: "billing", Message: inbox.Message{ID: id}, Err: boom, Attempts: 3}))

	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Len(t, rec.txs, 4)
	require.Equal(t, 1, rec.txs[0].Applied)
	require.Equal(t, 1, rec.txs[1].Duplicates)
	require.ErrorIs(t, rec.txs[2].Err, boom)
	require.Zero(t, rec.txs[2].Applied)
	require.Equal(t, 3, rec.txs[3].Messages)
	require.Equal(t, 2, rec.txs[3].Applied)
	require.Equal(t, 1, rec.txs[3].Duplicates)
	for i, e := range rec.txs {
		require.True(t, rec.ctx[i], "TxEnd gets the context TxStart returned")
		require.Positive(t, e.Claim, "claim time of tx %d", i)
	}
	require.Positive(t, rec.txs[0].Commit)
	require.Len(t, rec.dead, 1)
	require.Equal(t, inbox.ReasonMaxAttempts, rec.dead[0].Reason)
	require.Equal(t, 3, rec.dead[0].Attempts)
}
