package inbox_test

import (
	"context"
	"testing"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/internal/require"
)

type tagKey struct{}

// tagger appends its tag to the context's and records what it saw.
type tagger struct {
	tag    string
	ends   []string
	pauses int
}

func (o *tagger) TxStart(ctx context.Context, _ string, _ []inbox.Message) context.Context {
	prev, _ := ctx.Value(tagKey{}).(string)
	return context.WithValue(ctx, tagKey{}, prev+o.tag)
}
func (o *tagger) TxEnd(ctx context.Context, _ *inbox.TxEvent) {
	o.ends = append(o.ends, ctx.Value(tagKey{}).(string))
}
func (o *tagger) DeadLettered(context.Context, *inbox.DeadLetterEvent) {}

type breakerTagger struct{ tagger }

func (o *breakerTagger) Paused(context.Context, *inbox.PauseEvent)  { o.pauses++ }
func (o *breakerTagger) Resumed(context.Context, *inbox.PauseEvent) { o.pauses++ }

func TestObservers(t *testing.T) {
	a, b := &tagger{tag: "a"}, &breakerTagger{tagger{tag: "b"}}
	obs := inbox.Observers(a, nil, b)
	ctx := obs.TxStart(context.Background(), "c", nil)
	obs.TxEnd(ctx, &inbox.TxEvent{})
	require.Equal(t, []string{"ab"}, a.ends, "TxStart chains the contexts; TxEnd gets the last")
	require.Equal(t, []string{"ab"}, b.ends)
	bo, ok := obs.(inbox.BreakerObserver)
	require.True(t, ok, "Observers is a BreakerObserver")
	bo.Paused(ctx, &inbox.PauseEvent{})
	bo.Resumed(ctx, &inbox.PauseEvent{})
	require.Equal(t, 2, b.pauses)
}
