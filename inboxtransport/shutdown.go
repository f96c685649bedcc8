package inboxtransport

import (
	"context"
	"sync"
	"time"
)

// workContext returns the context of a consumer's work while stop is not
// done, and for grace after: it keeps stop's values (fault hooks, trace
// context) but not its cancellation, so that work in progress when the
// consumer is told to stop can finish and be acknowledged; it is cancelled
// once grace has passed after stop is done, and then the work rolls back.
// Call finish when the work has ended: it cancels the context and returns
// once the goroutine that watches stop has ended.
func workContext(stop context.Context, grace time.Duration) (work context.Context, finish func()) {
	work, cancel := context.WithCancel(context.WithoutCancel(stop))
	done, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-done:
			return
		case <-stop.Done():
		}
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			cancel()
		}
	}()
	var once sync.Once
	return work, func() {
		once.Do(func() {
			close(done)
			<-watched
			cancel()
		})
	}
}
