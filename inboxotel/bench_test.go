package inboxotel_test

import (
	"context"
	"testing"
	"time"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxotel"
)

// BenchmarkObserver times TxStart and TxEnd for a batch of 100 messages
// that carry a trace context: the observer's cost per transaction, to
// divide by 100 for its cost per message.
func BenchmarkObserver(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(drop{}))
	defer tp.Shutdown(context.Background())
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	for _, c := range []struct {
		name string
		cfg  inboxotel.Config
	}{
		{"noop", inboxotel.Config{TracerProvider: tracenoop.NewTracerProvider(), MeterProvider: metricnoop.NewMeterProvider(), Propagator: propagation.TraceContext{}}},
		{"sdk", inboxotel.Config{TracerProvider: tp, MeterProvider: mp, Propagator: propagation.TraceContext{}}},
	} {
		obs, err := inboxotel.New(&c.cfg)
		if err != nil {
			b.Fatal(err)
		}
		for _, headers := range []bool{false, true} {
			msgs := make([]inbox.Message, 100)
			for i := range msgs {
				msgs[i].ID = "0190a2b4-6f6e-7c3a-9d1e-5b2f3c4d5e6f"
				if headers {
					msgs[i].Headers = map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
				}
			}
			name := c.name + "/no-context"
			if headers {
				name = c.name + "/traceparent"
			}
			b.Run(name, func(b *testing.B) {
				b.ReportAllocs()
				ctx := context.Background()
				for b.Loop() {
					tctx := obs.TxStart(ctx, "billing", msgs)
					obs.TxEnd(tctx, &inbox.TxEvent{Consumer: "billing", Messages: 100, Applied: 100, Claim: time.Millisecond, Handler: time.Millisecond, Commit: time.Millisecond})
				}
			})
		}
	}
}

type drop struct{}

func (drop) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (drop) Shutdown(context.Context) error                             { return nil }
