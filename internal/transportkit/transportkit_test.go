package transportkit

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fill runs Fill and returns what it took.
func fill(ctx context.Context, ch <-chan int, n int, wait time.Duration, stop <-chan struct{}) []int {
	var got []int
	Fill(ctx, ch, n, wait, stop, func(v int) { got = append(got, v) })
	return got
}

// TestFillTakesWhatIsReady: without a wait, Fill takes what the channel
// holds, up to n, and returns when it is empty or closed.
func TestFillTakesWhatIsReady(t *testing.T) {
	t.Parallel()
	ch := make(chan int, 5)
	ch <- 1
	ch <- 2
	ch <- 3
	require.Equal(t, []int{1, 2}, fill(t.Context(), ch, 2, 0, nil), "at most n")
	require.Equal(t, []int{3}, fill(t.Context(), ch, 4, 0, nil), "what is ready")
	require.Empty(t, fill(t.Context(), ch, 0, time.Hour, nil), "n of 0 takes nothing and does not wait")
	close(ch)
	require.Empty(t, fill(t.Context(), ch, 4, time.Hour, nil), "a closed channel ends it")
}

// TestFillWaits: with a wait, Fill takes what arrives after it began, and
// returns once it has n, or when stop is closed or ctx is done.
func TestFillWaits(t *testing.T) {
	t.Parallel()
	ch := make(chan int) // unbuffered: each value arrives while Fill waits
	go func() {
		for i := range 3 {
			ch <- i
		}
	}()
	require.Equal(t, []int{0, 1, 2}, fill(t.Context(), ch, 3, time.Hour, nil))

	stop := make(chan struct{})
	close(stop)
	require.Empty(t, fill(t.Context(), ch, 3, time.Hour, stop), "stop ends the wait")

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	require.Empty(t, fill(ctx, ch, 3, time.Hour, nil), "ctx ends the wait")

	require.Empty(t, fill(t.Context(), ch, 3, time.Millisecond, nil), "the wait ends")
}
