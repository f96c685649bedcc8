package transporttest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxtransport"
	"github.com/txinbox/inbox/internal/testdb"
	"github.com/txinbox/inbox/internal/txcount"
	"github.com/txinbox/inbox/outbox"
)

// benchBatch is the MaxBatch of Benchmark's consumers.
const benchBatch = 100

// Benchmark measures a consumer end to end, one worker at MaxBatch 100,
// with a handler that does nothing but claim (the inbox's own work): b.N
// messages published beforehand, the time to apply them all. It runs once
// receiving ahead ("ahead", the default) and once receiving each batch only
// after the last one is settled ("sequential", as the loops did before),
// so that the two are compared in one run, on one machine.
func Benchmark[TTx any](b *testing.B, tr Transport[TTx]) {
	for _, mode := range []struct {
		name       string
		sequential bool
	}{{"ahead", false}, {"sequential", true}} {
		b.Run(fmt.Sprintf("%s/batch=%d", mode.name, benchBatch), func(b *testing.B) {
			benchmark(b, tr, mode.sequential)
		})
	}
}

func benchmark[TTx any](b *testing.B, tr Transport[TTx], sequential bool) {
	ahead := !sequential
	ctx := context.Background()
	schema := testdb.Schema(b)
	obs := &txcount.Observer{}
	client, closeClient, err := tr.Client(ctx, testdb.URL(b), inboxdriver.Tables{Schema: schema}, &inbox.Config{Observer: obs})
	require.NoError(b, err)
	b.Cleanup(closeClient)
	migrate(b, client)
	q := tr.NewQueue(b, QueueOptions{})
	msgs := make([]Message, b.N)
	for i := range msgs {
		msgs[i] = msg(newID(), event{N: i})
	}
	require.NoError(b, q.Publish(ctx, msgs...))

	var done counter
	all := make(chan struct{})
	c, err := q.Consumer(ConsumerOptions[TTx]{
		Client:   client,
		Handler:  inbox.HandlerFunc[TTx](func(context.Context, TTx, inbox.Message) error { return nil }),
		Consumer: ConsumerName,
		Key:      inbox.HeaderKey(outbox.HeaderEventID),
		Settings: inboxtransport.Settings{
			Workers: 1, MaxBatch: benchBatch, ReplayInterval: -1,
			OnResult: func(r inboxtransport.Result) {
				if r.Err == nil {
					done.add()
					if done.get() == int64(b.N) {
						close(all)
					}
				}
			},
		},
		ReceiveAhead: &ahead,
	})
	require.NoError(b, err)
	b.ResetTimer()
	start := time.Now()
	r := Start(b, ctx, c.Run, nil)
	WaitClosed(b, "every message applied", all)
	elapsed := time.Since(start)
	b.StopTimer()
	require.NoError(b, r.Stop())
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msg/s")
	if n := obs.Get(); n.Txs > 0 {
		b.ReportMetric(float64(n.Messages)/float64(n.Txs), "msg/tx")
	}
}
