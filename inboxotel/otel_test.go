package inboxotel_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver testdb creates schemas with
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxmigrate"
	"github.com/txinbox/inbox/inboxotel"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/inboxsql"
	"github.com/txinbox/inbox/inboxsql/inboxsqlite"
	"github.com/txinbox/inbox/inboxtest"
	"github.com/txinbox/inbox/internal/testdb"
	"github.com/txinbox/inbox/outbox"
)

func TestMain(m *testing.M) { testdb.Main(m) }

var pools = testdb.Shared[*pgxpool.Pool]{Query: testdb.PgxPool}

// telemetry is an Observer over an in-memory SDK.
type telemetry struct {
	obs    *inboxotel.Observer
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	reader *sdkmetric.ManualReader
}

func newTelemetry(t *testing.T) *telemetry {
	t.Helper()
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	obs, err := inboxotel.New(&inboxotel.Config{TracerProvider: tp, MeterProvider: mp, Propagator: propagation.TraceContext{}})
	require.NoError(t, err)
	return &telemetry{obs: obs, spans: sr, tp: tp, reader: reader}
}

// ended returns the ended spans named name.
func (tm *telemetry) ended(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range tm.spans.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// sum returns the value of the counter name at the attributes kvs.
func (tm *telemetry) sum(t *testing.T, name string, kvs ...attribute.KeyValue) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, tm.reader.Collect(context.Background(), &rm))
	want := attribute.NewSet(kvs...)
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				if dp.Attributes.Equals(&want) {
					return dp.Value
				}
			}
		}
	}
	return 0
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	out := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		out[kv.Key] = kv.Value
	}
	return out
}

// headersOf returns headers carrying the context of a new span of tp.
func headersOf(ctx context.Context, tp trace.TracerProvider) (map[string]string, trace.SpanContext) {
	_, span := tp.Tracer("test").Start(ctx, "producer")
	defer span.End()
	h := map[string]string{}
	propagation.TraceContext{}.Inject(trace.ContextWithSpan(ctx, span), propagation.MapCarrier(h))
	return h, span.SpanContext()
}

func sqliteClient(t *testing.T, obs inbox.Observer) *inbox.Client[*sql.Tx] {
	t.Helper()
	db, err := inboxsqlite.Open(filepath.Join(t.TempDir(), "inbox.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	d, err := inboxsql.New(db, inboxsqlite.Engine, nil)
	require.NoError(t, err)
	migrate(t, d)
	c, err := inbox.NewClient(d, &inbox.Config{Observer: obs})
	require.NoError(t, err)
	return c
}

func migrate(t *testing.T, d inboxdriver.Admin) {
	t.Helper()
	m, err := inboxmigrate.New(d)
	require.NoError(t, err)
	_, err = m.Up(context.Background())
	require.NoError(t, err)
}

var okSQL = inbox.HandlerFunc[*sql.Tx](func(context.Context, *sql.Tx, inbox.Message) error { return nil })

func TestProcessSpan(t *testing.T) {
	t.Parallel()
	tm := newTelemetry(t)
	c := sqliteClient(t, tm.obs)
	ctx := context.Background()
	h, producer := headersOf(ctx, tm.tp)
	id := inboxtest.NewID()
	msg := inbox.Message{ID: id, Headers: h, Source: inbox.Source{Transport: "sqs", Queue: "orders", Attempt: 1}}
	inboxtest.RequireApplied(t)(c.Process(ctx, "billing", msg, okSQL))
	msg.Source.Attempt, msg.Source.Redelivered = 2, true
	inboxtest.RequireDuplicate(t)(c.Process(ctx, "billing", msg, okSQL))
	msg.Source.Attempt, msg.Source.Redelivered = 1, false
	inboxtest.RequireDuplicate(t)(c.Process(ctx, "billing", msg, okSQL))

	spans := tm.ended("process billing")
	require.Len(t, spans, 3)
	for _, s := range spans {
		require.Equal(t, trace.SpanKindConsumer, s.SpanKind())
		require.Equal(t, producer.TraceID(), s.SpanContext().TraceID(), "the process span continues the message's trace")
		require.Equal(t, producer.SpanID(), s.Parent().SpanID())
		a := attrs(s)
		require.Equal(t, "sqs", a["messaging.system"].AsString())
		require.Equal(t, "process", a["messaging.operation.type"].AsString())
		require.Equal(t, "billing", a["messaging.consumer.group.name"].AsString())
		require.Equal(t, "orders", a["messaging.destination.name"].AsString())
		require.Equal(t, id, a["messaging.message.id"].AsString())
	}
	a := attrs(spans[0])
	require.Equal(t, "applied", a[inboxotel.AttrOutcome].AsString())
	require.Equal(t, int64(1), a[inboxotel.AttrDeliveryAttempt].AsInt64())
	a = attrs(spans[1])
	require.Equal(t, "duplicate", a[inboxotel.AttrOutcome].AsString())
	require.Equal(t, "redelivery", a[inboxotel.AttrDuplicateReason].AsString())
	require.Equal(t, int64(2), a[inboxotel.AttrDeliveryAttempt].AsInt64())
	a = attrs(spans[2])
	require.Equal(t, "republish", a[inboxotel.AttrDuplicateReason].AsString())

	group := attribute.String("messaging.consumer.group.name", "billing")
	require.Equal(t, int64(1), tm.sum(t, "inbox.messages", group, inboxotel.AttrOutcome.String("applied")))
	require.Equal(t, int64(2), tm.sum(t, "inbox.messages", group, inboxotel.AttrOutcome.String("duplicate")))
	require.Equal(t, int64(1), tm.sum(t, "inbox.duplicates", group, inboxotel.AttrDuplicateReason.String("redelivery")))
	require.Equal(t, int64(1), tm.sum(t, "inbox.duplicates", group, inboxotel.AttrDuplicateReason.String("republish")))
}

func TestFailureAndDeadLetter(t *testing.T) {
	t.Parallel()
	tm := newTelemetry(t)
	c := sqliteClient(t, tm.obs)
	ctx := context.Background()
	boom := errors.New("boom")
	msg := inbox.Message{ID: inboxtest.NewID()}
	_, err := c.Process(ctx, "billing", msg, inbox.HandlerFunc[*sql.Tx](func(context.Context, *sql.Tx, inbox.Message) error { return boom }))
	require.ErrorIs(t, err, boom)
	require.NoError(t, c.DeadLetter(ctx, inbox.DeadLetterParams{Consumer: "billing", Message: msg, Err: boom, Attempts: 3, Reason: "mine"}))
	spans := tm.ended("process billing")
	require.Len(t, spans, 1)
	a := attrs(spans[0])
	require.Equal(t, "failed", a[inboxotel.AttrOutcome].AsString())
	require.Equal(t, "message", a["error.type"].AsString())
	require.Equal(t, "Error", spans[0].Status().Code.String())
	group := attribute.String("messaging.consumer.group.name", "billing")
	require.Equal(t, int64(1), tm.sum(t, "inbox.messages", group, inboxotel.AttrOutcome.String("failed")))
	require.Equal(t, int64(1), tm.sum(t, "inbox.dead_letters", group, inboxotel.AttrDeadLetterReason.String("other")), "a reason of the caller's own is not a label")
}

func TestBatchSpanLinks(t *testing.T) {
	t.Parallel()
	tm := newTelemetry(t)
	c := sqliteClient(t, tm.obs)
	ctx, poll := tm.tp.Tracer("test").Start(context.Background(), "poll")
	var msgs []inbox.Message
	var producers []trace.SpanContext
	for range 3 {
		h, sc := headersOf(context.Background(), tm.tp)
		msgs = append(msgs, inbox.Message{ID: inboxtest.NewID(), Headers: h})
		producers = append(producers, sc)
	}
	_, err := c.ProcessBatch(ctx, "billing", msgs, okSQL)
	require.NoError(t, err)
	for i := range msgs {
		msgs[i].Source.Redelivered = true
	}
	_, err = c.ProcessBatch(ctx, "billing", msgs, okSQL)
	require.NoError(t, err)
	poll.End()

	spans := tm.ended("process billing")
	require.Len(t, spans, 2)
	require.Equal(t, int64(3), attrs(spans[0])[inboxotel.AttrApplied].AsInt64())
	a := attrs(spans[1])
	require.Equal(t, int64(3), a[inboxotel.AttrDuplicates].AsInt64())
	require.Equal(t, int64(3), a[inboxotel.AttrRedeliveries].AsInt64())
	require.Equal(t, int64(0), a[inboxotel.AttrRepublishes].AsInt64())
	s := spans[1]
	require.Equal(t, poll.SpanContext().SpanID(), s.Parent().SpanID(), "a batch's span is a child of the caller's span")
	links := map[trace.SpanID]bool{}
	for _, l := range s.Links() {
		links[l.SpanContext.SpanID()] = true
	}
	for _, p := range producers {
		require.True(t, links[p.SpanID()], "the batch span links every message's context")
	}
	require.Equal(t, int64(len(msgs)), a["messaging.batch.message_count"].AsInt64())
}

// TestOutboxTrace follows one event from the producer's transaction to the
// consumer: create at enqueue, send in the relay, process at the consumer,
// all one trace.
func TestOutboxTrace(t *testing.T) {
	t.Parallel()
	tm := newTelemetry(t)
	pool := pools.Get(t, pgxpool.New, (*pgxpool.Pool).Close)
	d, err := inboxpgx.New(pool, &inboxpgx.Config{Tables: inboxdriver.Tables{Schema: testdb.Schema(t)}})
	require.NoError(t, err)
	migrate(t, d)
	ob, err := outbox.New(d, &outbox.Config{Observer: tm.obs})
	require.NoError(t, err)
	ctx, root := tm.tp.Tracer("test").Start(context.Background(), "place order")
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	mine := map[string]string{"k": "v"}
	ids, err := ob.EnqueueTx(ctx, tx, outbox.Message{Topic: "orders", Headers: mine})
	require.NoError(t, err)
	require.Equal(t, map[string]string{"k": "v"}, mine, "the caller's headers are left as they were")
	require.NoError(t, tx.Commit(ctx))
	root.End()

	sink := &outbox.MemorySink{}
	relay, err := ob.NewRelay(tm.obs.Sink(sink), &outbox.RelayConfig{Observer: tm.obs})
	require.NoError(t, err)
	res, err := relay.RelayOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, res.Published)
	recs := sink.Records()
	require.Len(t, recs, 1)
	require.Equal(t, "v", recs[0].Headers["k"])
	require.NotEmpty(t, recs[0].Headers["traceparent"])

	c, err := inbox.NewClient(d, &inbox.Config{Observer: tm.obs})
	require.NoError(t, err)
	msg := inbox.Message{ID: recs[0].Headers[outbox.HeaderEventID], Headers: recs[0].Headers, Source: inbox.Source{Transport: "kafka", Queue: "orders"}}
	inboxtest.RequireApplied(t)(c.Process(context.Background(), "shipping", msg, inbox.HandlerFunc[pgx.Tx](func(context.Context, pgx.Tx, inbox.Message) error { return nil })))

	create := tm.ended("create orders")
	send := tm.ended("send orders")
	process := tm.ended("process shipping")
	require.Len(t, create, 1)
	require.Len(t, send, 1)
	require.Len(t, process, 1)
	traceID := root.SpanContext().TraceID()
	for _, s := range []sdktrace.ReadOnlySpan{create[0], send[0], process[0]} {
		require.Equal(t, traceID, s.SpanContext().TraceID(), "span %s is in the trace begun at enqueue", s.Name())
	}
	require.Equal(t, root.SpanContext().SpanID(), create[0].Parent().SpanID())
	require.Equal(t, create[0].SpanContext().SpanID(), send[0].Parent().SpanID())
	require.Equal(t, create[0].SpanContext().SpanID(), process[0].Parent().SpanID())
	require.Equal(t, trace.SpanKindProducer, create[0].SpanKind())
	require.Equal(t, trace.SpanKindClient, send[0].SpanKind())
	require.Equal(t, ids[0], attrs(create[0])["messaging.message.id"].AsString())
	require.Equal(t, "send", attrs(send[0])["messaging.operation.type"].AsString())
	require.Equal(t, int64(1), tm.sum(t, "outbox.published", inboxotel.AttrResult.String("ok")))
}

// TestNoopProvider: with OpenTelemetry's no-op providers the observer
// passes the message's context through and records nothing.
func TestNoopProvider(t *testing.T) {
	obs, err := inboxotel.New(&inboxotel.Config{TracerProvider: noop.NewTracerProvider(), Propagator: propagation.TraceContext{}})
	require.NoError(t, err)
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	h, producer := headersOf(context.Background(), tp)
	ctx := obs.TxStart(context.Background(), "billing", []inbox.Message{{ID: "x", Headers: h}})
	require.Equal(t, producer.TraceID(), trace.SpanContextFromContext(ctx).TraceID(), "the no-op span carries the message's context")
	obs.TxEnd(ctx, &inbox.TxEvent{Consumer: "billing", Messages: 1, Applied: 1})
	require.Len(t, sr.Ended(), 1) // only the producer's
}

// A relay's publish of several events makes one send span that links each
// event's create span.
func TestSendLinks(t *testing.T) {
	t.Parallel()
	tm := newTelemetry(t)
	pool := pools.Get(t, pgxpool.New, (*pgxpool.Pool).Close)
	d, err := inboxpgx.New(pool, &inboxpgx.Config{Tables: inboxdriver.Tables{Schema: testdb.Schema(t)}})
	require.NoError(t, err)
	migrate(t, d)
	ob, err := outbox.New(d, &outbox.Config{Observer: tm.obs})
	require.NoError(t, err)
	_, err = ob.Enqueue(context.Background(), outbox.Message{Topic: "orders"}, outbox.Message{Topic: "orders"}, outbox.Message{Topic: "orders"})
	require.NoError(t, err)
	sink := &outbox.MemorySink{}
	relay, err := ob.NewRelay(tm.obs.Sink(sink), nil)
	require.NoError(t, err)
	res, err := relay.RelayOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, 3, res.Published)

	create := tm.ended("create orders")
	send := tm.ended("send orders")
	require.Len(t, create, 3)
	require.Len(t, send, 1)
	require.Equal(t, int64(3), attrs(send[0])["messaging.batch.message_count"].AsInt64())
	links := map[trace.SpanID]bool{}
	for _, l := range send[0].Links() {
		links[l.SpanContext.SpanID()] = true
	}
	for _, c := range create {
		require.True(t, links[c.SpanContext().SpanID()], "the send span links create span %s", c.SpanContext().SpanID())
	}
}

func TestSinkKeepsKeyOrderWhereTheWrappedSinkDoes(t *testing.T) {
	t.Parallel()
	tm := newTelemetry(t)
	keeps := func(s outbox.Sink) bool {
		ks, ok := tm.obs.Sink(s).(outbox.KeyOrderSink)
		return ok && ks.KeepsKeyOrder()
	}
	require.True(t, keeps(&outbox.MemorySink{}), "over a MemorySink")
	require.False(t, keeps(outbox.SinkFunc(func(context.Context, []outbox.Record) []error { return nil })), "over a plain sink")
}
