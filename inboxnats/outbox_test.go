package inboxnats_test

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox/inboxnats"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/outbox"
	"github.com/txinbox/inbox/outbox/outboxtest"
)

// The sink conformance suite on the machine's NATS server: a subject of the
// test's stream, whose duplicate window drops a republished event; a
// subject no stream takes for an unroutable record; and the sink's
// connection closed for the broker's unavailability.
func TestOutboxSink(t *testing.T) {
	t.Parallel()
	h := newHarness(t, machineServer(t))
	nc, err := nats.Connect(h.srv.url)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	sink := inboxnats.NewOutboxSink(jetstreamOf(nc))

	topic := h.subject + ".outbox"
	ctx := context.Background()
	cons, err := h.js.OrderedConsumer(ctx, h.stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{topic}})
	require.NoError(t, err)
	outboxtest.Run(t, outboxtest.Harness{
		Sink:  sink,
		Topic: topic,
		Receive: func(ctx context.Context) ([]outboxtest.Received, error) {
			batch, err := cons.Fetch(100, jetstream.FetchContext(ctx))
			if err != nil {
				return nil, err
			}
			var out []outboxtest.Received
			for m := range batch.Messages() {
				r := outboxtest.Received{Headers: map[string]string{}, Payload: m.Data(), BrokerID: m.Headers().Get(jetstream.MsgIDHeader)}
				for k := range m.Headers() {
					r.Headers[k] = m.Headers().Get(k)
				}
				out = append(out, r)
			}
			return out, batch.Error()
		},
		Dedups:     true,
		Unroutable: "inboxtest-nostream." + h.stream,
		Break:      func(*testing.T) { nc.Close() },
	})
}

// A relay over the sink publishes each event with its id as Nats-Msg-Id,
// and deletes the rows it published; the stream keeps one copy of an
// event that a relay published twice.
func TestOutboxRelayToJetStream(t *testing.T) {
	t.Parallel()
	h := newHarness(t, machineServer(t))
	ctx := context.Background()
	topic := h.subject + ".relay"
	o, err := outbox.New(h.client.Driver().(*inboxpgx.Driver), nil)
	require.NoError(t, err)
	ids, err := o.Enqueue(ctx, outbox.Message{Topic: topic, Payload: []byte(`{"n":1}`)}, outbox.Message{Topic: topic, Payload: []byte(`{"n":2}`)})
	require.NoError(t, err)
	sink := inboxnats.NewOutboxSink(h.js)
	r, err := o.NewRelay(sink, nil)
	require.NoError(t, err)
	res, err := r.RelayOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, res.Published)
	// A relay that died before its delete publishes the first event again.
	_, err = o.Store().OutboxGet(ctx, ids[0])
	require.Error(t, err, "the published row is gone")
	again := outbox.Record{ID: ids[0], Topic: topic, Headers: map[string]string{outbox.HeaderEventID: ids[0]}, Payload: []byte(`{"n":1}`)}
	require.NoError(t, sink.Publish(ctx, []outbox.Record{again})[0])

	stream, err := h.js.Stream(ctx, h.stream)
	require.NoError(t, err)
	si, err := stream.Info(ctx, jetstream.WithSubjectFilter(topic))
	require.NoError(t, err)
	require.EqualValues(t, 2, si.State.Msgs, "the stream dropped the republished copy")
	last, err := stream.GetLastMsgForSubject(ctx, topic)
	require.NoError(t, err)
	require.Equal(t, ids[1], last.Header.Get(jetstream.MsgIDHeader))
	require.Equal(t, ids[1], last.Header.Get(outbox.HeaderEventID))
}
