// Package outboxtest is the conformance suite of outbox sinks: what every
// outbox.Sink must do against its real broker, whatever the broker.
// inboxkafka, inboxsqs, inboxnats and inboxrabbit run it in their tests.
package outboxtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
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
	// Topic is a topic (Kafka topic, subject, queue) that Receive reads, new
	// and empty.
	Topic string
	// Receive receives messages published to Topic: those that arrive
	// before ctx is done, at least one when some are there, none when ctx
	// ends first. It returns an error only when receiving failed; ctx's
	// end is none. The suite calls it again until it has what it waits
	// for, each call with a context of a second.
	Receive func(ctx context.Context) ([]Received, error)
	// Dedups reports that the broker drops a republished event within its
	// window (NATS with Nats-Msg-Id): it confirms it, and Receive does
	// not see it again.
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

// receiveWait bounds the suite's wait for the messages it published.
const receiveWait = time.Minute

// reader reads a harness's messages in order, through its Receive.
type reader struct {
	receive func(ctx context.Context) ([]Received, error)
	// buffered are the messages received and not yet read.
	buffered []Received
}

// read returns the next n messages, failing t when they have not all
// arrived within receiveWait.
func (r *reader) read(t *testing.T, n int) []Received {
	t.Helper()
	deadline := time.Now().Add(receiveWait)
	for len(r.buffered) < n {
		if time.Now().After(deadline) {
			t.Fatalf("received %d of %d messages in %v", len(r.buffered), n, receiveWait)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		ms, err := r.receive(ctx)
		if err != nil && ctx.Err() == nil {
			require.NoError(t, err, "receive")
		}
		cancel()
		r.buffered = append(r.buffered, ms...)
	}
	out := r.buffered[:n:n]
	r.buffered = r.buffered[n:]
	return out
}

// Run runs the suite on h, each case a subtest, in order.
func Run(t *testing.T, h Harness) {
	ctx := context.Background()
	rd := &reader{receive: h.Receive}
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
		for _, m := range rd.read(t, n) {
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
		ms := rd.read(t, 3)
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
