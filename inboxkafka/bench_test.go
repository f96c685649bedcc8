package inboxkafka_test

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txinbox/inbox/inboxkafka"
)

// BenchmarkEndToEnd measures records per second from producer to committed
// effect: b.N records are produced to a 4-partition kfake topic while one
// consumer applies them, each with one INSERT, in batches of MaxBatch
// records per transaction into Postgres. The timer starts once the consumer
// has joined the group and ends when the last record is processed.
//
//	go test -run '^$' -bench EndToEnd -benchtime 20000x ./inboxkafka/
func BenchmarkEndToEnd(b *testing.B) {
	for _, batch := range []int{1, 100, 500} {
		b.Run("batch="+strconv.Itoa(batch), func(b *testing.B) {
			e := newEnv(b, protocols[0], envOpts{partitions: 4})
			warmup := events(4, 4)
			evs := events(b.N, 400)
			var processed atomic.Int64
			target := int64(len(warmup))
			var reached sync.Once
			warmed, done := make(chan struct{}), make(chan struct{})
			cfg := consumerConfig()
			cfg.MaxBatch = batch
			cfg.OnResult = func(r inboxkafka.Result) {
				if r.Err != nil {
					return
				}
				switch processed.Add(1) {
				case target:
					close(warmed)
				case target + int64(b.N):
					reached.Do(func() { close(done) })
				}
			}
			r := e.start("bench", cfg, e.handler())
			e.produce(warmup)
			waitClosed(b, warmed, time.Minute, "the warm-up records")

			b.ResetTimer()
			start := time.Now()
			e.produce(evs)
			waitClosed(b, done, 10*time.Minute, "the records")
			elapsed := time.Since(start)
			b.StopTimer()
			r.stop(b)
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "records/s")
		})
	}
}

func waitClosed(b *testing.B, ch <-chan struct{}, timeout time.Duration, what string) {
	b.Helper()
	select {
	case <-ch:
	case <-time.After(timeout):
		b.Fatalf("timed out after %v waiting for %s", timeout, what)
	}
}
