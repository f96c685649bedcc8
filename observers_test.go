package inbox_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
)

type tagKey struct{}

// tagger appends its tag to the context's and records what it saw.
type tagger struct {
	tag  string
	ends []string
}

func (o *tagger) TxStart(ctx context.Context, _ string, _ []inbox.Message) context.Context {
	prev, _ := ctx.Value(tagKey{}).(string)
	return context.WithValue(ctx, tagKey{}, prev+o.tag)
}
func (o *tagger) TxEnd(ctx context.Context, _ *inbox.TxEvent) {
	o.ends = append(o.ends, ctx.Value(tagKey{}).(string))
}
func (o *tagger) DeadLettered(context.Context, *inbox.DeadLetterEvent) {}

func TestObservers(t *testing.T) {
	a, b := &tagger{tag: "a"}, &tagger{tag: "b"}
	obs := inbox.Observers(a, nil, b)
	ctx := obs.TxStart(context.Background(), "c", nil)
	obs.TxEnd(ctx, &inbox.TxEvent{})
	require.Equal(t, []string{"ab"}, a.ends, "TxStart chains the contexts; TxEnd gets the last")
	require.Equal(t, []string{"ab"}, b.ends)
	u, ok := obs.(interface{ Unwrap() []inbox.Observer })
	require.True(t, ok, "Observers unwraps to what it joined, for inboxtransport's breaker")
	require.Len(t, u.Unwrap(), 2, "the nil observer is left out")
}
