package inboxkafka

import (
	"context"
	"errors"
	"net"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txinbox/inbox/outbox"
)

// OutboxSink publishes an outbox's events to Kafka with the caller's
// client: each event is a record of its topic, with the event's key as the
// record key and its headers, the event id in outbox.HeaderEventID among
// them. A consumer reads the id with inbox.HeaderKey(outbox.HeaderEventID).
//
// Configure the client as any producer whose records must not be lost:
// acks from all in-sync replicas (kgo's default) and idempotent writes (its
// default too), so that a retry inside the client does not write a record
// twice and a key's records keep their order in its partition.
//
// A batch goes to the client in one ProduceSync: the client batches the
// records per partition as it would any others, and does not linger on a
// batch the relay is waiting for (kgo.ProducerLinger applies to the
// client's other producers only).
type OutboxSink struct {
	cl producer
}

// producer is what the sink calls of a *kgo.Client.
type producer interface {
	ProduceSync(ctx context.Context, rs ...*kgo.Record) kgo.ProduceResults
}

var _ outbox.Sink = (*OutboxSink)(nil)

// NewOutboxSink returns a sink over cl, the caller's configured client.
func NewOutboxSink(cl *kgo.Client) *OutboxSink { return &OutboxSink{cl: cl} }

// Publish implements outbox.Sink. It produces every record and waits for
// each one's acknowledgement. A failure that retrying can mend (a broker
// down, a leader moving, a timeout) is the broker's unavailability; an error
// that says the record itself is wrong (too large, invalid, not allowed on
// its topic) is a rejection.
func (s *OutboxSink) Publish(ctx context.Context, recs []outbox.Record) []error {
	errs := make([]error, len(recs))
	for i := range errs {
		errs[i] = errNoResult
	}
	krs := make([]kgo.Record, len(recs))
	ptrs := make([]*kgo.Record, len(recs))
	at := make(map[*kgo.Record]int, len(recs))
	for i, rec := range recs {
		krs[i] = kgo.Record{Topic: rec.Topic, Key: rec.Key, Value: rec.Payload, Headers: kafkaHeaders(rec.Headers)}
		ptrs[i] = &krs[i]
		at[ptrs[i]] = i
	}
	// The results come in the order the broker answered, not in ours.
	for _, r := range s.cl.ProduceSync(ctx, ptrs...) {
		if i, ok := at[r.Record]; ok {
			errs[i] = classifyProduce(r.Err)
		}
	}
	return errs
}

// errNoResult stands for a record the client gave no result for, which
// kgo never does: it is not taken for a confirmation.
var errNoResult = outbox.Unavailable(errors.New("inboxkafka: the client returned no result for the record"))

// kafkaHeaders are h as record headers, in name order.
func kafkaHeaders(h map[string]string) []kgo.RecordHeader {
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	slices.Sort(names)
	out := make([]kgo.RecordHeader, len(names))
	for i, k := range names {
		out[i] = kgo.RecordHeader{Key: k, Value: []byte(h[k])}
	}
	return out
}

// rejections are the broker's answers about the record itself, which
// producing it again cannot mend, though kerr calls some retriable.
var rejections = []*kerr.Error{
	kerr.MessageTooLarge, kerr.CorruptMessage, kerr.InvalidRecord, kerr.RecordListTooLarge,
	kerr.InvalidTopicException, kerr.TopicAuthorizationFailed, kerr.PolicyViolation,
	kerr.InvalidRequiredAcks, kerr.UnsupportedForMessageFormat, kerr.InvalidTimestamp,
}

// classifyProduce tells the relay whose fault a produce error is.
func classifyProduce(err error) error {
	if err == nil {
		return nil
	}
	for _, r := range rejections {
		if errors.Is(err, r) {
			return err
		}
	}
	var netErr net.Error
	switch {
	case kerr.IsRetriable(err),
		errors.Is(err, kgo.ErrRecordTimeout), errors.Is(err, kgo.ErrRecordRetries),
		errors.Is(err, kgo.ErrMaxBuffered), errors.Is(err, kgo.ErrAborting), errors.Is(err, kgo.ErrClientClosed),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded),
		errors.As(err, &netErr):
		return outbox.Unavailable(err)
	}
	return err
}
