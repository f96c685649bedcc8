package bench

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxotel"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/inboxprom"
)

// The telemetry rows are inbox-batch-100 with an observer on: what tracing
// and metrics cost per message, beside the same row with none.
//
//   - inbox-batch-100-otel-noop: inboxotel over OpenTelemetry's no-op
//     providers, what an application that never set up the SDK pays;
//   - inbox-batch-100-otel-sdk: inboxotel over the SDK, every span sampled
//     and batched to an exporter that drops them, metrics aggregated in
//     memory;
//   - inbox-batch-100-prom: inboxprom on a registry of its own.
var telemetryRows = []*row{
	{name: "inbox-batch-100-otel-noop", batch: 100, postgres: true, inbox: true, needs: []*resource{telemetryResource}, op: telemetryBatch("otel-noop")},
	{name: "inbox-batch-100-otel-sdk", batch: 100, postgres: true, inbox: true, needs: []*resource{telemetryResource}, op: telemetryBatch("otel-sdk")},
	{name: "inbox-batch-100-prom", batch: 100, postgres: true, inbox: true, needs: []*resource{telemetryResource}, op: telemetryBatch("prom")},
}

// The telemetry rows follow inbox-batch-100 in the results.
func init() {
	i := slices.IndexFunc(rows, func(r *row) bool { return r.name == "inbox-batch-100" })
	rows = slices.Insert(rows, i+1, telemetryRows...)
}

// telemetryStore holds a client per observer, over the run's pool and
// inbox table.
type telemetryStore struct {
	clients map[string]*inbox.Client[pgx.Tx]
}

var telemetryResource = &resource{
	name: "telemetry",
	open: func(ctx context.Context, b *bench) (func(), error) {
		d, err := inboxpgx.New(b.pool, &inboxpgx.Config{Tables: inboxdriver.Tables{Schema: b.schema}})
		if err != nil {
			return nil, err
		}
		noop, err := inboxotel.New(&inboxotel.Config{
			TracerProvider: tracenoop.NewTracerProvider(), MeterProvider: metricnoop.NewMeterProvider(), Propagator: propagation.TraceContext{},
		})
		if err != nil {
			return nil, err
		}
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(dropExporter{}), sdktrace.WithSampler(sdktrace.AlwaysSample()))
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		sdk, err := inboxotel.New(&inboxotel.Config{TracerProvider: tp, MeterProvider: mp, Propagator: propagation.TraceContext{}})
		if err != nil {
			return nil, err
		}
		prom, err := inboxprom.New(inboxprom.Config{Registerer: prometheus.NewRegistry()})
		if err != nil {
			return nil, err
		}
		s := &telemetryStore{clients: map[string]*inbox.Client[pgx.Tx]{}}
		for name, obs := range map[string]inbox.Observer{"otel-noop": noop, "otel-sdk": sdk, "prom": prom} {
			if s.clients[name], err = inbox.NewClient(d, &inbox.Config{Observer: obs}); err != nil {
				return nil, err
			}
		}
		b.telemetry = s
		return func() {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = tp.Shutdown(sctx)
			_ = mp.Shutdown(sctx)
		}, nil
	},
}

// dropExporter exports spans nowhere.
type dropExporter struct{}

func (dropExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (dropExporter) Shutdown(context.Context) error                             { return nil }

// telemetryBatch is inboxBatch with the client of observer.
func telemetryBatch(observer string) func(ctx context.Context, b *bench, w *worker) error {
	return func(ctx context.Context, b *bench, w *worker) error {
		es := w.next(b, w.batch)
		results, err := b.telemetry.clients[observer].ProcessBatch(ctx, consumer, w.messages(es), b.pg.batchHandler)
		if err != nil {
			return err
		}
		for i, r := range results {
			if r.Err != nil {
				return r.Err
			}
			if r.Outcome != inbox.Applied {
				return fmt.Errorf("message %s: got %v, want %v", es[i].msg.ID, r.Outcome, inbox.Applied)
			}
		}
		return nil
	}
}

// telemetryRatios compare each telemetry row with inbox-batch-100 at the
// same worker count. The target is the run's noise: a row meets it when
// its msgs/s is at least the baseline's slowest round over its median.
// The client CPU each observer adds per message is reported beside it.
func (r *Report) telemetryRatios() []Ratio {
	var out []Ratio
	for _, tr := range telemetryRows {
		for i := range r.Results {
			x := &r.Results[i]
			if x.Name != tr.name {
				continue
			}
			base := r.result("inbox-batch-100", x.Workers)
			if base == nil || base.MsgsPerS == 0 {
				continue
			}
			v, noise := rateRatio(x, base), base.MinRate/base.MsgsPerS
			out = append(out, Ratio{
				Name:  fmt.Sprintf("%s ÷ inbox-batch-100, msgs/s at %d %s (≥ the baseline's slowest round ÷ its median, %.2f)", x.Name, x.Workers, workersWord(x.Workers), noise),
				Value: round2(v), Want: round2(noise), Met: v >= noise,
			})
			if x.ClientCPUUsPerMsg != nil && base.ClientCPUUsPerMsg != nil {
				out = append(out, Ratio{
					Name:       fmt.Sprintf("%s: client CPU µs/msg added over inbox-batch-100 at %d %s (report only)", x.Name, x.Workers, workersWord(x.Workers)),
					Value:      round2(*x.ClientCPUUsPerMsg - *base.ClientCPUUsPerMsg),
					ReportOnly: true, Met: true,
				})
			}
		}
	}
	return out
}

// result returns the row name at workers, or nil.
func (r *Report) result(name string, workers int) *Result {
	for i := range r.Results {
		if r.Results[i].Name == name && r.Results[i].Workers == workers {
			return &r.Results[i]
		}
	}
	return nil
}
