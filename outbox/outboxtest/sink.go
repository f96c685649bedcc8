// Package outboxtest is the conformance suite of outbox sinks: what every
// outbox.Sink must do against its real broker, whatever the broker.
// inboxkafka, inboxsqs, inboxnats and inboxrabbit run it in their tests.
package outboxtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/internal/require"
	"github.com/txinbox/inbox/internal/uuid"
	"github.com/txinbox/inbox/outbox"
)

// Received is a message as a consumer of the broker got it.
type Received struct {
	Headers map[string]string
	Payload []byte
	// BrokerID is the id the broker's message carries besides its headers,
	// where it has one (AMQP's message-id, NATS's Nats-Msg-Id), or "".
	BrokerID string
}

// Harness is a sink over a real broker, with what the suite needs to check
// it.
type Harness struct {
	// Sink is the sink under test.
	Sink outbox.Sink
	// Topic is a topic (Kafka topic, subject, queue) that Read reads, new
	// and empty.
	Topic string
	// Read returns the next n messages published to Topic, waiting for them
	// as long as it must, up to a deadline, after which it fails t.
	Read func(t *testing.T, n int) []Received
	// Dedups reports that the broker drops a republished event within its
	// window (NATS with Nats-Msg-Id): it confirms it, and Read does not see
	// it again.
	Dedups bool
	// Unroutable, if set, is a topic to which the broker refuses the
	// sink's records: the suite checks that the sink calls that a
	// rejection, and confirms the batch's other records.
	Unroutable string
	// Break, if set, cuts the sink off from the broker for good (closes its
	// connection): the suite checks that the sink calls that the broker's
	// unavailability. It runs last.
	Break func(t *testing.T)
}

// Run runs the suite on h, each case a subtest, in order.
func Run(t *testing.T, h Harness) {
	ctx := context.Background()
	rec := func(payload string, headers map[string]string) outbox.Record {
		id := uuid.V7(time.Now())
		hs := map[string]string{outbox.HeaderEventID: id}
		for k, v := range headers {
			hs[k] = v
		}
		return outbox.Record{ID: id, Topic: h.Topic, Key: []byte("k1"), Headers: hs, Payload: []byte(payload), CreatedAt: time.Now()}
	}
	// byID reads n messages and indexes them by their event-id header.
	byID := func(t *testing.T, n int) map[string]Received {
		got := map[string]Received{}
		for _, m := range h.Read(t, n) {
			id, err := inbox.HeaderKey(outbox.HeaderEventID)(inbox.Message{Headers: m.Headers})
			require.NoError(t, err, "a consumer reads the id with inbox.HeaderKey(outbox.HeaderEventID)")
			got[id] = m
		}
		return got
	}

	t.Run("ConfirmsAndCarriesTheEvent", func(t *testing.T) {
		recs := []outbox.Record{
			rec(`{"n":1}`, map[string]string{"trace": "t-1"}),
			rec(`{"n":2}`, map[string]string{outbox.HeaderCausationID: "c-2", outbox.HeaderKeySeq: "7"}),
			rec(`[]`, nil),
		}
		for i, err := range h.Sink.Publish(ctx, recs) {
			require.NoError(t, err, "record %d", i)
		}
		got := byID(t, len(recs))
		require.Len(t, got, len(recs))
		for _, r := range recs {
			m, ok := got[r.ID]
			require.True(t, ok, "event %s arrived", r.ID)
			require.Equal(t, string(r.Payload), string(m.Payload))
			for k, v := range r.Headers {
				require.Equal(t, v, m.Headers[k], "header %s", k)
			}
			if m.BrokerID != "" {
				require.Equal(t, r.ID, m.BrokerID, "the broker's id is the event id")
			}
		}
	})

	t.Run("RepublishKeepsTheID", func(t *testing.T) {
		r := rec(`{"n":3}`, nil)
		for range 2 {
			errs := h.Sink.Publish(ctx, []outbox.Record{r})
			require.Len(t, errs, 1)
			require.NoError(t, errs[0])
		}
		next := rec(`{"n":4}`, nil)
		require.NoError(t, h.Sink.Publish(ctx, []outbox.Record{next})[0])
		if h.Dedups {
			got := byID(t, 2)
			require.Len(t, got, 2, "the broker dropped the republished copy")
			return
		}
		ms := h.Read(t, 3)
		for i, m := range ms[:2] {
			require.Equal(t, r.ID, m.Headers[outbox.HeaderEventID], "copy %d", i)
		}
	})

	t.Run("EndedContextIsUnavailable", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		errs := h.Sink.Publish(cctx, []outbox.Record{rec(`{}`, nil), rec(`{}`, nil)})
		require.Len(t, errs, 2)
		for i, err := range errs {
			require.True(t, outbox.IsUnavailable(err), "record %d: %v", i, err)
		}
	})

	if h.Unroutable != "" {
		t.Run("UnroutableIsARejection", func(t *testing.T) {
			bad := rec(`{"n":5}`, nil)
			bad.Topic = h.Unroutable
			good := rec(`{"n":6}`, nil)
			errs := h.Sink.Publish(ctx, []outbox.Record{bad, good})
			require.Len(t, errs, 2)
			require.Error(t, errs[0], "the unroutable record is not confirmed")
			require.False(t, outbox.IsUnavailable(errs[0]), "an unroutable record is a rejection: %v", errs[0])
			require.NoError(t, errs[1], "the batch's other record is confirmed")
			got := byID(t, 1)
			_, ok := got[good.ID]
			require.True(t, ok, "the routable record arrived")
		})
	}

	if h.Break != nil {
		t.Run("LostConnectionIsUnavailable", func(t *testing.T) {
			h.Break(t)
			errs := h.Sink.Publish(ctx, []outbox.Record{rec(`{}`, nil)})
			require.Len(t, errs, 1)
			require.Error(t, errs[0])
			require.True(t, outbox.IsUnavailable(errs[0]) || errors.Is(errs[0], outbox.ErrUnavailable), "a lost connection is unavailability: %v", errs[0])
		})
	}
}
