package inboxkafka_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txinbox/inbox/inboxkafka"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/outbox"
)

// BenchmarkOutboxRelay measures how fast one running relay drains a full
// outbox to a 4-partition kfake topic, at batch 100 and 500, with one
// batch in flight and with four (RelayConfig.Workers): claim, produce with
// acks, delete. b.N events are enqueued first, a thousand to a
// transaction, outside the timer.
//
//	go test -run '^$' -bench OutboxRelay -benchtime 20000x ./inboxkafka/
func BenchmarkOutboxRelay(b *testing.B) {
	for _, c := range []struct{ batch, workers int }{{100, 1}, {100, 4}, {500, 1}, {500, 4}} {
		batch, workers := c.batch, c.workers
		b.Run("batch"+strconv.Itoa(batch)+"/workers"+strconv.Itoa(workers), func(b *testing.B) {
			e := newEnv(b, protocols[0], envOpts{partitions: 4})
			ctx := context.Background()
			o, err := outbox.New(e.client.Driver().(*inboxpgx.Driver), nil)
			if err != nil {
				b.Fatal(err)
			}
			payload := []byte(`{"order_id":"0190c8e4-7b3a-7cc1-9f00-2b7c4e1d9a55","amount_cents":1250,"currency":"EUR"}`)
			for i := 0; i < b.N; i += 1000 {
				msgs := make([]outbox.Message, min(1000, b.N-i))
				for j := range msgs {
					msgs[j] = outbox.Message{Topic: e.topic, Key: []byte("acct-" + strconv.Itoa((i+j)%400)), Payload: payload}
				}
				if _, err := o.Enqueue(ctx, msgs...); err != nil {
					b.Fatal(err)
				}
			}
			producer, err := kgo.NewClient(kgo.SeedBrokers(e.seeds...))
			if err != nil {
				b.Fatal(err)
			}
			defer producer.Close()
			done := make(chan struct{})
			sink := &doneSink{sink: inboxkafka.NewOutboxSink(producer), want: int64(b.N), done: done}
			r, err := o.NewRelay(sink, &outbox.RelayConfig{BatchSize: batch, Workers: workers})
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			rctx, cancel := context.WithCancel(ctx)
			ran := make(chan error, 1)
			go func() { ran <- r.Run(rctx) }()
			select {
			case <-done:
			case <-time.After(5 * time.Minute):
				b.Fatalf("%d of %d events published after 5 minutes", sink.n.Load(), b.N)
			}
			b.StopTimer()
			cancel()
			if err := <-ran; err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// doneSink counts the records its sink confirmed and closes done at want.
type doneSink struct {
	sink outbox.Sink
	n    atomic.Int64
	want int64
	once sync.Once
	done chan struct{}
}

func (s *doneSink) Publish(ctx context.Context, recs []outbox.Record) []error {
	errs := s.sink.Publish(ctx, recs)
	var ok int64
	for _, err := range errs {
		if err == nil {
			ok++
		}
	}
	if s.n.Add(ok) >= s.want {
		s.once.Do(func() { close(s.done) })
	}
	return errs
}
