package bench

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxkafka"
)

// quietFor quiets the background resources of a phase that the row about
// to run does not need, and wakes those it needs.
func TestQuietFor(t *testing.T) {
	t.Parallel()
	quiet := map[string]bool{}
	res := func(name string) *resource {
		return &resource{name: name, background: true, quiet: func(_ *bench, on bool) { quiet[name] = on }}
	}
	kafka, wsql, plain := res("kafka"), res("watermill-sql"), &resource{name: "sqlite"}
	background := []*resource{kafka, wsql, plain}
	quietFor(nil, background, &row{needs: []*resource{kafka}})
	require.Equal(t, map[string]bool{"kafka": false, "watermill-sql": true}, quiet)
	quietFor(nil, background, &row{needs: []*resource{wsql, plain}})
	require.Equal(t, map[string]bool{"kafka": true, "watermill-sql": false}, quiet)
}

// A closed gate holds its callers until it opens or their context ends;
// an open one, or the zero gate, lets them through.
func TestGate(t *testing.T) {
	t.Parallel()
	var g gate
	require.NoError(t, g.wait(context.Background()))
	g.close(true)
	g.close(true) // closing a closed gate changes nothing
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, g.wait(ctx), context.Canceled)
	passed := make(chan error, 1)
	go func() { passed <- g.wait(context.Background()) }()
	select {
	case err := <-passed:
		t.Fatalf("a closed gate let a caller through: %v", err)
	default:
	}
	g.close(false)
	require.NoError(t, <-passed)
	require.NoError(t, g.wait(context.Background()))
}

// The Kafka row's operation is woken once its partition is done up to its
// last record, and not before; a result that failed and will be retried
// does not count.
func TestKafkaStoreWait(t *testing.T) {
	t.Parallel()
	k := &kafkaStore{done: map[int32]int64{}, waits: map[int32][]*offsetWait{}, failed: make(chan struct{})}
	result := func(part int32, offset int64, err error) inboxkafka.Result {
		return inboxkafka.Result{Message: inbox.Message{Source: inbox.Source{Partition: part, Offset: offset}}, Err: err}
	}
	isDone := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	first := k.wait(0, 100) // offsets 0 to 99
	other := k.wait(1, 1)
	for off := int64(0); off < 99; off++ {
		k.observe(result(0, off, nil))
	}
	k.observe(result(0, 99, context.DeadlineExceeded))
	require.False(t, isDone(first), "done before its last record")
	k.observe(result(0, 99, nil))
	require.True(t, isDone(first))
	require.False(t, isDone(other), "another partition's records do not count")
	require.True(t, isDone(k.wait(0, 50)), "an offset already done")
	k.forget(1, other)
	k.observe(result(1, 0, nil))
	require.False(t, isDone(other), "a forgotten wait is not woken")
	require.Empty(t, k.waits[0])
	require.Empty(t, k.waits[1])
}
