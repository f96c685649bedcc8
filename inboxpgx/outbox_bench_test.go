package inboxpgx_test

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/outbox"
)

// BenchmarkOutboxEnqueue measures a business transaction (BEGIN, an UPDATE
// of one of 64 accounts, COMMIT) bare and with 1, 10 and 100 events
// enqueued in it, at 8 workers: the outbox's cost to the producer.
func BenchmarkOutboxEnqueue(b *testing.B) {
	d, schema := newDriver(b, inboxdriver.Tables{})
	ctx := context.Background()
	pool := d.Pool()
	accounts := pgx.Identifier{schema, "accounts"}.Sanitize()
	if _, err := pool.Exec(ctx, `CREATE TABLE `+accounts+` (id int PRIMARY KEY, balance bigint NOT NULL);
INSERT INTO `+accounts+` SELECT g, 0 FROM generate_series(0, 63) g`); err != nil {
		b.Fatal(err)
	}
	o, err := outbox.New(d, nil)
	if err != nil {
		b.Fatal(err)
	}
	payload := []byte(`{"order_id":"0190c8e4-7b3a-7cc1-9f00-2b7c4e1d9a55","amount_cents":1250,"currency":"EUR"}`)
	for _, n := range []int{0, 1, 10, 100} {
		name := "bare"
		if n > 0 {
			name = strconv.Itoa(n)
		}
		b.Run(name, func(b *testing.B) {
			msgs := make([]outbox.Message, n)
			for i := range msgs {
				msgs[i] = outbox.Message{Topic: "orders", Key: []byte("acct-" + strconv.Itoa(i%64)), Payload: payload}
			}
			var worker sync.Mutex
			next := 0
			b.SetParallelism(4) // 8 workers on this 2-core machine
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				worker.Lock()
				acct := next % 64
				next++
				worker.Unlock()
				for pb.Next() {
					tx, err := pool.Begin(ctx)
					if err != nil {
						b.Error(err)
						return
					}
					if _, err := tx.Exec(ctx, `UPDATE `+accounts+` SET balance = balance + 1 WHERE id = $1`, acct); err != nil {
						b.Error(err)
						return
					}
					if n > 0 {
						if _, err := o.EnqueueTx(ctx, tx, msgs...); err != nil {
							b.Error(err)
							return
						}
					}
					if err := tx.Commit(ctx); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tx/s")
		})
	}
}

// BenchmarkOutboxRelay measures how fast one relay drains a full outbox,
// claim, publish and delete, to a sink that keeps nothing, at several
// batch sizes.
func BenchmarkOutboxRelay(b *testing.B) {
	for _, batch := range []int{25, 100, 200, 500} {
		b.Run("batch"+strconv.Itoa(batch), func(b *testing.B) {
			d, _ := newDriver(b, inboxdriver.Tables{})
			ctx := context.Background()
			o, err := outbox.New(d, nil)
			if err != nil {
				b.Fatal(err)
			}
			fillOutbox(b, o, b.N)
			sink := &outbox.MemorySink{Discard: true}
			r, err := o.NewRelay(sink, &outbox.RelayConfig{BatchSize: batch})
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for sink.Confirmed() < b.N {
				res, err := r.RelayOnce(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if res.Claimed == 0 {
					b.Fatalf("the outbox ran dry after %d of %d events", sink.Confirmed(), b.N)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// fillOutbox enqueues n events, a thousand to a transaction.
func fillOutbox(b *testing.B, o *outbox.Outbox[pgx.Tx], n int) {
	b.Helper()
	ctx := context.Background()
	payload := []byte(`{"order_id":"0190c8e4-7b3a-7cc1-9f00-2b7c4e1d9a55","amount_cents":1250,"currency":"EUR"}`)
	for i := 0; i < n; i += 1000 {
		msgs := make([]outbox.Message, min(1000, n-i))
		for j := range msgs {
			msgs[j] = outbox.Message{Topic: "orders", Key: []byte("acct-" + strconv.Itoa((i+j)%64)), Payload: payload}
		}
		if _, err := o.Enqueue(ctx, msgs...); err != nil {
			b.Fatal(err)
		}
	}
}

// latencySink reports when each event reached it.
type latencySink struct {
	seen chan string
}

func (s *latencySink) Publish(_ context.Context, recs []outbox.Record) []error {
	for _, r := range recs {
		s.seen <- r.ID
	}
	return make([]error, len(recs))
}

// BenchmarkOutboxLatency measures the time from a producer's commit to the
// sink's confirmation, one event at a time, with a relay that polls once a
// second: woken by Wake after the commit (wake), and by EnqueueTx alone,
// before the caller's commit (wake-before-commit), after which the relay
// looks again a few times.
func BenchmarkOutboxLatency(b *testing.B) {
	for _, mode := range []string{"wake", "wake-before-commit"} {
		b.Run(mode, func(b *testing.B) {
			d, _ := newDriver(b, inboxdriver.Tables{})
			ctx := context.Background()
			o, err := outbox.New(d, nil)
			if err != nil {
				b.Fatal(err)
			}
			sink := &latencySink{seen: make(chan string, 1)}
			r, err := o.NewRelay(sink, nil)
			if err != nil {
				b.Fatal(err)
			}
			rctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- r.Run(rctx) }()
			defer func() { cancel(); <-done }()
			lat := make([]time.Duration, 0, b.N)
			msg := outbox.Message{Topic: "orders", Payload: []byte(`{}`)}
			b.ResetTimer()
			for range b.N {
				var id string
				var committed time.Time
				switch mode {
				case "wake":
					tx, err := d.Pool().Begin(ctx)
					if err != nil {
						b.Fatal(err)
					}
					ids, err := o.EnqueueTx(ctx, tx, msg)
					if err != nil {
						b.Fatal(err)
					}
					if err := tx.Commit(ctx); err != nil {
						b.Fatal(err)
					}
					committed = time.Now()
					o.Wake()
					id = ids[0]
				default:
					tx, err := d.Pool().Begin(ctx)
					if err != nil {
						b.Fatal(err)
					}
					ids, err := o.EnqueueTx(ctx, tx, msg)
					if err != nil {
						b.Fatal(err)
					}
					if err := tx.Commit(ctx); err != nil {
						b.Fatal(err)
					}
					committed = time.Now()
					id = ids[0]
				}
				select {
				case got := <-sink.seen:
					if got != id {
						b.Fatalf("published %s, want %s", got, id)
					}
				case <-time.After(30 * time.Second):
					b.Fatal("the event was not published within 30s")
				}
				lat = append(lat, time.Since(committed))
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}

// BenchmarkOutboxDrain measures how fast RelayOnce drains a backlog into a
// discarding MemorySink, ordered over 4 keys and unordered, at growing
// backlogs: the ordered relay's cost must grow with the backlog no faster
// than the unordered one's. The backlogs are INBOX_DRAIN_SIZES, a comma-
// separated list (default 10000,100000); run it with -benchtime=1x:
//
//	INBOX_DRAIN_SIZES=5000,20000 go test -run '^$' -bench OutboxDrain -benchtime=1x ./inboxpgx/
func BenchmarkOutboxDrain(b *testing.B) {
	sizes := []int{10_000, 100_000}
	if s := os.Getenv("INBOX_DRAIN_SIZES"); s != "" {
		sizes = sizes[:0]
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n <= 0 {
				b.Fatalf("INBOX_DRAIN_SIZES: %q is not a positive number", f)
			}
			sizes = append(sizes, n)
		}
	}
	for _, ordered := range []bool{true, false} {
		for _, n := range sizes {
			name := "unordered/" + strconv.Itoa(n)
			if ordered {
				name = "ordered-4keys/" + strconv.Itoa(n)
			}
			b.Run(name, func(b *testing.B) {
				d, _ := newDriver(b, inboxdriver.Tables{})
				ctx := context.Background()
				o, err := outbox.New(d, &outbox.Config{Ordered: ordered})
				if err != nil {
					b.Fatal(err)
				}
				sink := &outbox.MemorySink{Discard: true}
				r, err := o.NewRelay(sink, nil)
				if err != nil {
					b.Fatal(err)
				}
				var drained time.Duration
				for i := range b.N {
					fillKeys(b, o, n, 4)
					start := time.Now()
					for sink.Confirmed() < (i+1)*n {
						res, err := r.RelayOnce(ctx)
						if err != nil {
							b.Fatal(err)
						}
						if res.Claimed == 0 {
							b.Fatalf("the outbox ran dry after %d of %d events", sink.Confirmed(), (i+1)*n)
						}
					}
					drained += time.Since(start)
				}
				b.ReportMetric(float64(b.N*n)/drained.Seconds(), "msgs/s")
			})
		}
	}
}

// fillKeys enqueues n events over keys keys, a thousand to a transaction.
func fillKeys(b *testing.B, o *outbox.Outbox[pgx.Tx], n, keys int) {
	b.Helper()
	ctx := context.Background()
	payload := []byte(`{"order_id":"0190c8e4-7b3a-7cc1-9f00-2b7c4e1d9a55","amount_cents":1250,"currency":"EUR"}`)
	for i := 0; i < n; i += 1000 {
		msgs := make([]outbox.Message, min(1000, n-i))
		for j := range msgs {
			msgs[j] = outbox.Message{Topic: "orders", Key: []byte("key-" + strconv.Itoa((i+j)%keys)), Payload: payload}
		}
		if _, err := o.Enqueue(ctx, msgs...); err != nil {
			b.Fatal(err)
		}
	}
}
