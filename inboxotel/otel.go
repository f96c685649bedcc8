// Package inboxotel traces and measures the inbox and the outbox with
// OpenTelemetry. It uses the OpenTelemetry API only: the application
// chooses and configures the SDK (or none, which costs next to nothing).
//
// An Observer is an inbox.Observer (Config.Observer of inbox.NewClient): it
// makes a "process {consumer}" span of kind consumer per transaction,
// following OpenTelemetry's messaging conventions, continuing the trace
// context carried in the message's headers (one message) or linking each
// message's context (a batch), and records metrics through the meter.
//
// It is also an outbox.EnqueueObserver (outbox.Config.Observer): each
// enqueued event gets a "create {topic}" span of kind producer whose
// context is stored in the event's headers, and an outbox.Observer
// (outbox.RelayConfig.Observer) for the relay's metrics. Wrap the relay's
// sink with Sink for a "send {topic}" span per publish. The consumer's
// process span then continues the trace begun at enqueue.
package inboxotel

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/outbox"
)

// ScopeName is the instrumentation scope of the tracer and the meter.
const ScopeName = "github.com/txinbox/inbox/inboxotel"

// Attribute keys of the spans and metrics, beside OpenTelemetry's
// messaging conventions (messaging.*).
const (
	// AttrOutcome is a single message's outcome: applied, duplicate or
	// failed; on a metric, also dead_lettered.
	AttrOutcome = attribute.Key("inbox.outcome")
	// AttrDuplicateReason is why a message was a duplicate: redelivery,
	// republish or concurrent.
	AttrDuplicateReason = attribute.Key("inbox.duplicate.reason")
	// AttrDeliveryAttempt is the broker's delivery count (Source.Attempt).
	AttrDeliveryAttempt = attribute.Key("inbox.delivery.attempt")
	// AttrRedelivered is Source.Redelivered.
	AttrRedelivered = attribute.Key("inbox.delivery.redelivered")
	// AttrApplied, AttrDuplicates, AttrRedeliveries, AttrRepublishes and
	// AttrConcurrent count a batch's messages by outcome and reason.
	AttrApplied      = attribute.Key("inbox.applied")
	AttrDuplicates   = attribute.Key("inbox.duplicates")
	AttrRedeliveries = attribute.Key("inbox.duplicates.redelivery")
	AttrRepublishes  = attribute.Key("inbox.duplicates.republish")
	AttrConcurrent   = attribute.Key("inbox.duplicates.concurrent")
	// AttrClaim, AttrHandler and AttrCommit are the transaction's phases,
	// in seconds.
	AttrClaim   = attribute.Key("inbox.claim.duration")
	AttrHandler = attribute.Key("inbox.handler.duration")
	AttrCommit  = attribute.Key("inbox.commit.duration")
	// AttrFault is inbox.Judge's verdict on a failure (error.type holds it
	// too): message, permanent, store, systemic or contention.
	AttrFault = attribute.Key("inbox.fault")
	// AttrDeadLetterReason is a dead letter's reason code.
	AttrDeadLetterReason = attribute.Key("inbox.dead_letter.reason")
	// AttrConflict is, on inbox.conflicts, conflict or lock_timeout.
	AttrConflict = attribute.Key("inbox.conflict")
	// AttrResult is, on outbox.published, ok, rejected or unavailable.
	AttrResult = attribute.Key("outbox.result")
)

// OpenTelemetry messaging attribute keys.
const (
	keySystem        = attribute.Key("messaging.system")
	keyOperationType = attribute.Key("messaging.operation.type")
	keyOperationName = attribute.Key("messaging.operation.name")
	keyDestination   = attribute.Key("messaging.destination.name")
	keyConsumerGroup = attribute.Key("messaging.consumer.group.name")
	keyMessageID     = attribute.Key("messaging.message.id")
	keyBatchCount    = attribute.Key("messaging.batch.message_count")
	keyErrorType     = attribute.Key("error.type")
)

// Config configures an Observer. The zero value uses OpenTelemetry's
// global providers and propagator.
type Config struct {
	// TracerProvider makes the spans. Defaults to otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// MeterProvider makes the metrics. Defaults to otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// Propagator reads the trace context from a message's headers and
	// writes it into an outbox event's. Defaults to
	// otel.GetTextMapPropagator(), which propagates nothing until the
	// application sets one (such as propagation.TraceContext{}).
	Propagator propagation.TextMapPropagator
	// System is messaging.system for messages whose Source.Transport is
	// empty, and for the outbox's spans. Defaults to "inbox".
	System string
}

// Observer traces and measures a client, an outbox and its relays. It is
// safe for concurrent use; make one per process and share it.
type Observer struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
	system string

	messages, duplicates, conflicts, deadLettered metric.Int64Counter
	process, claim, handler, commit               metric.Float64Histogram
	published, parked                             metric.Int64Counter
	publish, relayClaim, lag                      metric.Float64Histogram

	attrs sync.Map // attrKey → metric.MeasurementOption
	names sync.Map // consumer → its process span's name
}

var (
	_ inbox.Observer         = (*Observer)(nil)
	_ outbox.Observer        = (*Observer)(nil)
	_ outbox.EnqueueObserver = (*Observer)(nil)
)

// New returns an Observer. config may be nil.
func New(config *Config) (*Observer, error) {
	var cfg Config
	if config != nil {
		cfg = *config
	}
	if cfg.TracerProvider == nil {
		cfg.TracerProvider = otel.GetTracerProvider()
	}
	if cfg.MeterProvider == nil {
		cfg.MeterProvider = otel.GetMeterProvider()
	}
	if cfg.Propagator == nil {
		cfg.Propagator = otel.GetTextMapPropagator()
	}
	if cfg.System == "" {
		cfg.System = "inbox"
	}
	o := &Observer{
		tracer: cfg.TracerProvider.Tracer(ScopeName),
		prop:   cfg.Propagator,
		system: cfg.System,
	}
	m := cfg.MeterProvider.Meter(ScopeName)
	var errs []error
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	seconds := func(name, desc string) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
		errs = append(errs, err)
		return h
	}
	o.messages = counter("inbox.messages", "{message}", "Messages processed, by outcome.")
	o.duplicates = counter("inbox.duplicates", "{message}", "Duplicate messages skipped, by reason.")
	o.conflicts = counter("inbox.conflicts", "{transaction}", "Transactions that failed on a serialization conflict or deadlock (conflict) or waited too long for a lock (lock_timeout).")
	o.deadLettered = counter("inbox.dead_letters", "{message}", "Messages stored as dead letters, by reason.")
	o.process = seconds("messaging.process.duration", "Duration of the inbox's processing transactions.")
	o.claim = seconds("inbox.claim.duration", "Time to begin a transaction and claim its messages.")
	o.handler = seconds("inbox.handler.duration", "Time spent in handlers per transaction.")
	o.commit = seconds("inbox.commit.duration", "Time to commit a transaction.")
	o.published = counter("outbox.published", "{message}", "Events the relay offered to the broker, by result.")
	o.parked = counter("outbox.parked", "{message}", "Events parked for an operator after their rejections.")
	o.publish = seconds("outbox.publish.duration", "Time to publish one claimed batch.")
	o.relayClaim = seconds("outbox.claim.duration", "Time for a relay's claim.")
	o.lag = seconds("outbox.lag", "Age at its claim of the oldest event a batch published.")
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("inboxotel: %w", err)
	}
	return o, nil
}

// attrKey names a cached attribute set.
type attrKey struct {
	consumer string
	key      attribute.Key
	value    string
}

// set returns the measurement option of the attributes consumer and, when
// key is set, key=value, made once.
func (o *Observer) set(consumer string, key attribute.Key, value string) metric.MeasurementOption {
	k := attrKey{consumer, key, value}
	if v, ok := o.attrs.Load(k); ok {
		return v.(metric.MeasurementOption)
	}
	kvs := make([]attribute.KeyValue, 0, 3)
	if consumer != "" {
		kvs = append(kvs, keyConsumerGroup.String(consumer))
	}
	if key != "" {
		kvs = append(kvs, key.String(value))
	}
	opt := metric.WithAttributeSet(attribute.NewSet(kvs...))
	v, _ := o.attrs.LoadOrStore(k, opt)
	return v.(metric.MeasurementOption)
}

// TxStart starts the transaction's process span. A single message's span
// continues the trace context in its headers; a batch's span is a child of
// ctx's span and links every message's context.
func (o *Observer) TxStart(ctx context.Context, consumer string, msgs []inbox.Message) context.Context {
	parent := ctx
	if len(msgs) == 1 && len(msgs[0].Headers) > 0 {
		if sc := o.extract(ctx, msgs[0].Headers); sc.IsValid() {
			parent = trace.ContextWithRemoteSpanContext(ctx, sc)
		}
	}
	ctx, span := o.tracer.Start(parent, o.spanName(consumer), consumerKind)
	if !span.IsRecording() {
		return ctx
	}
	system := o.system
	if len(msgs) > 0 && msgs[0].Source.Transport != "" {
		system = msgs[0].Source.Transport
	}
	kvs := make([]attribute.KeyValue, 0, 8)
	kvs = append(kvs, keySystem.String(system), keyOperationType.String("process"), keyOperationName.String("process"), keyConsumerGroup.String(consumer))
	if len(msgs) > 0 && msgs[0].Source.Queue != "" && sameQueue(msgs) {
		kvs = append(kvs, keyDestination.String(msgs[0].Source.Queue))
	}
	if len(msgs) == 1 {
		m := &msgs[0]
		kvs = append(kvs, keyMessageID.String(m.ID))
		if m.Source.Attempt > 0 {
			kvs = append(kvs, AttrDeliveryAttempt.Int(m.Source.Attempt))
		}
		kvs = append(kvs, AttrRedelivered.Bool(m.Source.Redelivered))
	} else {
		kvs = append(kvs, keyBatchCount.Int(len(msgs)))
		for i := range msgs {
			if len(msgs[i].Headers) == 0 {
				continue
			}
			if sc := o.extract(ctx, msgs[i].Headers); sc.IsValid() {
				span.AddLink(trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{keyMessageID.String(msgs[i].ID)}})
			}
		}
	}
	span.SetAttributes(kvs...)
	return ctx
}

var consumerKind = trace.WithSpanKind(trace.SpanKindConsumer)

// spanName is "process {consumer}", made once per consumer.
func (o *Observer) spanName(consumer string) string {
	if v, ok := o.names.Load(consumer); ok {
		return v.(string)
	}
	name := "process " + consumer
	o.names.Store(consumer, name)
	return name
}

func sameQueue(msgs []inbox.Message) bool {
	for i := 1; i < len(msgs); i++ {
		if msgs[i].Source.Queue != msgs[0].Source.Queue {
			return false
		}
	}
	return true
}

// extract reads the span context in headers.
func (o *Observer) extract(ctx context.Context, headers map[string]string) trace.SpanContext {
	return trace.SpanContextFromContext(o.prop.Extract(context.Background(), propagation.MapCarrier(headers)))
}

// TxEnd ends the process span with the outcome, and records the metrics.
func (o *Observer) TxEnd(ctx context.Context, e *inbox.TxEvent) {
	o.record(ctx, e)
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		span.End()
		return
	}
	kvs := make([]attribute.KeyValue, 0, 8)
	kvs = append(kvs, AttrClaim.Float64(e.Claim.Seconds()), AttrHandler.Float64(e.Handler.Seconds()), AttrCommit.Float64(e.Commit.Seconds()))
	switch {
	case e.Err != nil:
		f := inbox.Judge(e.Err).String()
		kvs = append(kvs, AttrOutcome.String("failed"), AttrFault.String(f), keyErrorType.String(f))
		span.RecordError(e.Err)
		span.SetStatus(codes.Error, e.Err.Error())
	case e.Messages == 1 && e.Applied == 1:
		kvs = append(kvs, AttrOutcome.String("applied"))
	case e.Messages == 1 && e.Duplicates == 1:
		kvs = append(kvs, AttrOutcome.String("duplicate"), AttrDuplicateReason.String(reason(e)))
	default:
		kvs = append(kvs, AttrApplied.Int(e.Applied), AttrDuplicates.Int(e.Duplicates))
		if e.Duplicates > 0 {
			kvs = append(kvs, AttrRedeliveries.Int(e.Redelivered), AttrRepublishes.Int(e.Republished), AttrConcurrent.Int(e.Concurrent))
		}
	}
	span.SetAttributes(kvs...)
	span.End()
}

// reason is the reason of a single duplicate.
func reason(e *inbox.TxEvent) string {
	switch {
	case e.Concurrent > 0:
		return inbox.DuplicateConcurrent.String()
	case e.Redelivered > 0:
		return inbox.DuplicateRedelivery.String()
	default:
		return inbox.DuplicateRepublish.String()
	}
}

// record records the transaction's metrics.
func (o *Observer) record(ctx context.Context, e *inbox.TxEvent) {
	c := e.Consumer
	all := o.set(c, "", "")
	total := (e.Claim + e.Handler + e.Commit).Seconds()
	if e.Err != nil {
		f := inbox.Judge(e.Err).String()
		o.process.Record(ctx, total, o.set(c, keyErrorType, f))
		o.messages.Add(ctx, int64(e.Messages), o.set(c, AttrOutcome, "failed"))
		switch {
		case errors.Is(e.Err, inbox.ErrConflict):
			o.conflicts.Add(ctx, 1, o.set(c, AttrConflict, "conflict"))
		case errors.Is(e.Err, inbox.ErrLockTimeout):
			o.conflicts.Add(ctx, 1, o.set(c, AttrConflict, "lock_timeout"))
		}
	} else {
		o.process.Record(ctx, total, all)
		if e.Applied > 0 {
			o.messages.Add(ctx, int64(e.Applied), o.set(c, AttrOutcome, "applied"))
		}
		if e.Duplicates > 0 {
			o.messages.Add(ctx, int64(e.Duplicates), o.set(c, AttrOutcome, "duplicate"))
			for _, d := range [...]struct {
				n      int
				reason inbox.DuplicateReason
			}{{e.Redelivered, inbox.DuplicateRedelivery}, {e.Republished, inbox.DuplicateRepublish}, {e.Concurrent, inbox.DuplicateConcurrent}} {
				if d.n > 0 {
					o.duplicates.Add(ctx, int64(d.n), o.set(c, AttrDuplicateReason, d.reason.String()))
				}
			}
		}
	}
	o.claim.Record(ctx, e.Claim.Seconds(), all)
	o.handler.Record(ctx, e.Handler.Seconds(), all)
	o.commit.Record(ctx, e.Commit.Seconds(), all)
}

// DeadLettered counts the dead letter and adds an event to the current
// span.
func (o *Observer) DeadLettered(ctx context.Context, e *inbox.DeadLetterEvent) {
	r := DeadLetterReason(e.Reason)
	o.deadLettered.Add(ctx, 1, o.set(e.Consumer, AttrDeadLetterReason, r))
	o.messages.Add(ctx, 1, o.set(e.Consumer, AttrOutcome, "dead_lettered"))
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent("dead_lettered", trace.WithAttributes(keyMessageID.String(e.MessageID), AttrDeadLetterReason.String(r), attribute.Int("inbox.attempts", e.Attempts)))
	}
}

// DeadLetterReason bounds a dead letter's reason to the codes package
// inbox defines (inbox.KnownReason), and "other": a reason of the
// caller's own is not a label.
func DeadLetterReason(r string) string {
	if inbox.KnownReason(r) {
		return r
	}
	return "other"
}

// Enqueue starts and ends a "create {topic}" span for an event the outbox
// is about to write, and stores its context in the event's headers.
func (o *Observer) Enqueue(ctx context.Context, e *outbox.EnqueueEvent) {
	ctx, span := o.tracer.Start(ctx, "create "+e.Topic, trace.WithSpanKind(trace.SpanKindProducer))
	if span.IsRecording() {
		span.SetAttributes(keySystem.String(o.system), keyOperationType.String("create"), keyOperationName.String("create"),
			keyDestination.String(e.Topic), keyMessageID.String(e.ID))
	}
	o.prop.Inject(ctx, propagation.MapCarrier(e.Headers))
	span.End()
}

// Claimed records a relay's claim.
func (o *Observer) Claimed(ctx context.Context, e *outbox.ClaimEvent) {
	o.relayClaim.Record(ctx, e.Duration.Seconds(), o.set("", "", ""))
}

// Published records a published batch.
func (o *Observer) Published(ctx context.Context, e *outbox.PublishEvent) {
	for _, r := range [...]struct {
		n      int
		result string
	}{{e.Confirmed, "ok"}, {e.Rejected, "rejected"}, {e.Unavailable, "unavailable"}} {
		if r.n > 0 {
			o.published.Add(ctx, int64(r.n), o.set("", AttrResult, r.result))
		}
	}
	o.publish.Record(ctx, e.Duration.Seconds(), o.set("", "", ""))
	if e.Confirmed > 0 {
		o.lag.Record(ctx, e.MaxAge.Seconds(), o.set("", "", ""))
	}
}

// Parked counts a parked event.
func (o *Observer) Parked(ctx context.Context, e *outbox.ParkEvent) {
	o.parked.Add(ctx, 1, o.set("", "", ""))
}

// Sink wraps a relay's sink so that each call to Publish makes a "send
// {topic}" span ("send" when the records have several topics) of kind
// client, linking the create span of each event it publishes (one event's
// send span is its create span's child). The records' headers are passed
// on unchanged: the consumer continues the trace of the create span, the
// creation context. The wrapper keeps a key's order within a call
// (outbox.KeyOrderSink) where s does.
func (o *Observer) Sink(s outbox.Sink) outbox.Sink {
	return &sink{o: o, next: s}
}

type sink struct {
	o    *Observer
	next outbox.Sink
}

// KeepsKeyOrder implements outbox.KeyOrderSink: the wrapper passes the
// records on as they come, so it keeps order where the wrapped sink does.
func (s *sink) KeepsKeyOrder() bool {
	ks, ok := s.next.(outbox.KeyOrderSink)
	return ok && ks.KeepsKeyOrder()
}

func (s *sink) Publish(ctx context.Context, recs []outbox.Record) []error {
	if len(recs) == 0 {
		return s.next.Publish(ctx, recs)
	}
	topic := recs[0].Topic
	for i := 1; i < len(recs); i++ {
		if recs[i].Topic != topic {
			topic = ""
			break
		}
	}
	name := "send"
	if topic != "" {
		name += " " + topic
	}
	parent := ctx
	if len(recs) == 1 {
		if sc := s.o.extract(ctx, recs[0].Headers); sc.IsValid() {
			parent = trace.ContextWithRemoteSpanContext(ctx, sc)
		}
	}
	ctx, span := s.o.tracer.Start(parent, name, trace.WithSpanKind(trace.SpanKindClient))
	if span.IsRecording() {
		kvs := []attribute.KeyValue{keySystem.String(s.o.system), keyOperationType.String("send"), keyOperationName.String("send")}
		if topic != "" {
			kvs = append(kvs, keyDestination.String(topic))
		}
		if len(recs) == 1 {
			kvs = append(kvs, keyMessageID.String(recs[0].ID))
		} else {
			kvs = append(kvs, keyBatchCount.Int(len(recs)))
			for i := range recs {
				if sc := s.o.extract(ctx, recs[i].Headers); sc.IsValid() {
					span.AddLink(trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{keyMessageID.String(recs[i].ID)}})
				}
			}
		}
		span.SetAttributes(kvs...)
	}
	errs := s.next.Publish(ctx, recs)
	if span.IsRecording() {
		failed := 0
		var first error
		for _, err := range errs {
			if err != nil {
				failed++
				if first == nil {
					first = err
				}
			}
		}
		if first != nil {
			span.SetStatus(codes.Error, fmt.Sprintf("%d of %d records failed: %v", failed, len(recs), first))
		}
	}
	span.End()
	return errs
}
