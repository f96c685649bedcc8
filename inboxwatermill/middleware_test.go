package inboxwatermill_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/jackc/pgx/v5"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxwatermill"
	"github.com/txinbox/inbox/internal/fault"
	"github.com/txinbox/inbox/outbox"
)

// effectHandler applies the message's effect in the inbox transaction and
// counts its runs.
func effectHandler[TTx any](s *store[TTx], runs *atomic.Int32) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		runs.Add(1)
		tx, ok := inboxwatermill.TxFromContext[TTx](msg.Context())
		if !ok {
			return nil, errors.New("no transaction in the message's context")
		}
		return nil, s.effect(msg.Context(), tx, msg.UUID)
	}
}

func requireOnceEach(t *testing.T, effects map[string]int, ids []string) {
	t.Helper()
	require.Len(t, effects, len(ids))
	for _, id := range ids {
		require.Equal(t, 1, effects[id], "effects of %s", id)
	}
}

// Watermill's Duplicator middleware handles every message twice; under the
// inbox the second is a Duplicate, and each message has one effect.
func TestDuplicatorYieldsOneEffect(t *testing.T) {
	t.Parallel()
	onBothStores(t, duplicatorYieldsOneEffect[*sql.Tx], duplicatorYieldsOneEffect[pgx.Tx])
}

func duplicatorYieldsOneEffect[TTx any](t *testing.T, s *store[TTx]) {
	ps := newPubSub(t)
	r := newRouter(t)
	var runs atomic.Int32
	h := r.AddHandler("billing", "orders", ps, "receipts", failingPublisher{}, effectHandler(s, &runs))
	h.AddMiddleware(middleware.Duplicator, inboxwatermill.Middleware(s.client, "billing", nil))
	runRouter(t, r)

	sent := ids(20)
	publish(t, ps, "orders", sent) // returns once the Router acked each
	require.Equal(t, int32(len(sent)), runs.Load(), "the handler ran once per message")
	requireOnceEach(t, s.effects(t), sent)
}

// A consumer that dies after the commit and before the ack: a wrapper
// outside the inbox fails the first call of each message after the inbox
// committed, so the Router nacks and the message comes back. The
// redelivery is a Duplicate: applied once.
func TestCrashBetweenCommitAndAck(t *testing.T) {
	t.Parallel()
	onBothStores(t, crashBetweenCommitAndAck[*sql.Tx], crashBetweenCommitAndAck[pgx.Tx])
}

func crashBetweenCommitAndAck[TTx any](t *testing.T, s *store[TTx]) {
	ps := newPubSub(t)
	r := newRouter(t)
	var runs, crashes, deliveries atomic.Int32
	var mu sync.Mutex
	crashed := map[string]bool{}
	crashAfterCommit := func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			deliveries.Add(1)
			out, err := h(msg)
			if err != nil {
				return out, err
			}
			mu.Lock()
			defer mu.Unlock()
			if !crashed[msg.UUID] {
				crashed[msg.UUID] = true
				crashes.Add(1)
				return nil, errors.New("crash after the commit, before the ack")
			}
			return out, nil
		}
	}
	h := r.AddHandler("billing", "orders", ps, "receipts", failingPublisher{}, effectHandler(s, &runs))
	h.AddMiddleware(crashAfterCommit, inboxwatermill.Middleware(s.client, "billing", nil))
	runRouter(t, r)

	sent := ids(10)
	publish(t, ps, "orders", sent)
	require.Equal(t, int32(len(sent)), crashes.Load(), "every message crashed once after its commit")
	require.Equal(t, int32(2*len(sent)), deliveries.Load(), "every message was delivered again")
	require.Equal(t, int32(len(sent)), runs.Load(), "the redeliveries were Duplicates: the handler did not run again")
	requireOnceEach(t, s.effects(t), sent)
}

// A handler's error rolls its transaction back and the Router nacks; the
// redelivery is applied, once.
func TestHandlerErrorIsRetried(t *testing.T) {
	t.Parallel()
	onBothStores(t, handlerErrorIsRetried[*sql.Tx], handlerErrorIsRetried[pgx.Tx])
}

func handlerErrorIsRetried[TTx any](t *testing.T, s *store[TTx]) {
	ps := newPubSub(t)
	r := newRouter(t)
	var runs atomic.Int32
	effect := effectHandler(s, &runs)
	var failed atomic.Bool
	h := r.AddHandler("billing", "orders", ps, "receipts", failingPublisher{}, func(msg *message.Message) ([]*message.Message, error) {
		if _, err := effect(msg); err != nil {
			return nil, err
		}
		if failed.CompareAndSwap(false, true) {
			return nil, errors.New("the handler failed after its effect")
		}
		return nil, nil
	})
	h.AddMiddleware(inboxwatermill.Middleware(s.client, "billing", nil))
	runRouter(t, r)

	sent := ids(3)
	publish(t, ps, "orders", sent)
	require.Equal(t, int32(len(sent)+1), runs.Load(), "one message was handled twice")
	requireOnceEach(t, s.effects(t), sent)
}

// produce is a handler that applies its effect and returns two messages.
func produce[TTx any](s *store[TTx], runs *atomic.Int32) message.HandlerFunc {
	effect := effectHandler(s, runs)
	return func(msg *message.Message) ([]*message.Message, error) {
		if _, err := effect(msg); err != nil {
			return nil, err
		}
		receipt := message.NewMessage(watermill.NewUUID(), []byte(`receipt`))
		receipt.Metadata = msg.Metadata // copied, outbox headers and all
		return []*message.Message{receipt, message.NewMessage(watermill.NewUUID(), []byte(`shipment`))}, nil
	}
}

// The messages a handler returns go into the outbox in its transaction,
// caused by the inbound message, and a relay through NewSink publishes
// each once; the Duplicator's second run produces nothing.
func TestProducedMessagesReachOutboxAndArePublishedOnce(t *testing.T) {
	t.Parallel()
	onBothStores(t, producedMessagesReachOutbox[*sql.Tx], producedMessagesReachOutbox[pgx.Tx])
}

func producedMessagesReachOutbox[TTx any](t *testing.T, s *store[TTx]) {
	ctx := context.Background()
	ps := newPubSub(t)
	r := newRouter(t)
	var runs atomic.Int32
	h := r.AddHandler("billing", "orders", ps, "receipts", failingPublisher{}, produce(s, &runs))
	h.AddMiddleware(middleware.Duplicator, inboxwatermill.Middleware(s.client, "billing", &inboxwatermill.Config[TTx]{Outbox: s.outbox}))
	runRouter(t, r)

	sent := ids(5)
	publish(t, ps, "orders", sent)
	requireOnceEach(t, s.effects(t), sent)
	st, err := s.client.Admin().OutboxStats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(2*len(sent)), st.Pending, "two produced messages per message, once")

	out := newPubSub(t)
	got := collect(t, out, "receipts")
	relay, err := s.outbox.NewRelay(inboxwatermill.NewSink(out, nil), nil)
	require.NoError(t, err)
	relayAll(t, relay, 2*len(sent))
	res, err := relay.RelayOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 0, res.Claimed, "nothing is left to publish")

	msgs := got.all() // the sink's publish returned once each was acked
	require.Len(t, msgs, 2*len(sent))
	seen := map[string]bool{}
	causes := map[string]int{}
	for _, m := range msgs {
		require.False(t, seen[m.UUID], "%s published once", m.UUID)
		seen[m.UUID] = true
		require.Equal(t, m.UUID, m.Metadata.Get(outbox.HeaderEventID), "the UUID is the event id")
		causes[m.Metadata.Get(outbox.HeaderCausationID)]++
	}
	for _, id := range sent {
		require.Equal(t, 2, causes[id], "the causation id is the inbound message's")
	}
}

// relayAll runs relay rounds until want records were published.
func relayAll(t *testing.T, relay *outbox.Relay, want int) {
	t.Helper()
	published := 0
	eventually(t, "the relay to publish everything", func() bool {
		res, err := relay.RelayOnce(context.Background())
		require.NoError(t, err)
		published += res.Published
		return published >= want
	})
	require.Equal(t, want, published)
}

// failingPublisher fails every publish.
type failingPublisher struct{}

func (failingPublisher) Publish(string, ...*message.Message) error {
	return errors.New("the broker refused the publish")
}
func (failingPublisher) Close() error { return nil }

// flakyPublisher fails its first publish, publishing nothing.
type flakyPublisher struct {
	message.Publisher
	failed atomic.Bool
}

func (p *flakyPublisher) Publish(topic string, msgs ...*message.Message) error {
	if p.failed.CompareAndSwap(false, true) {
		return errors.New("the broker refused the publish")
	}
	return p.Publisher.Publish(topic, msgs...)
}

// A publish that fails after the handler's transaction committed loses
// nothing: the produced messages are in the outbox, and the relay tries
// again. (The Router's own publisher fails every time: it is never used.)
func TestPublishFailureAfterCommitLosesNothing(t *testing.T) {
	t.Parallel()
	onBothStores(t, publishFailureLosesNothing[*sql.Tx], publishFailureLosesNothing[pgx.Tx])
}

func publishFailureLosesNothing[TTx any](t *testing.T, s *store[TTx]) {
	ctx := context.Background()
	ps := newPubSub(t)
	r := newRouter(t)
	var runs atomic.Int32
	h := r.AddHandler("billing", "orders", ps, "receipts", failingPublisher{}, produce(s, &runs))
	h.AddMiddleware(inboxwatermill.Middleware(s.client, "billing", &inboxwatermill.Config[TTx]{Outbox: s.outbox}))
	runRouter(t, r)

	sent := ids(3)
	publish(t, ps, "orders", sent)
	out := newPubSub(t)
	got := collect(t, out, "receipts")
	flaky := &flakyPublisher{Publisher: out}
	relay, err := s.outbox.NewRelay(inboxwatermill.NewSink(flaky, nil), &outbox.RelayConfig{Backoff: func(int) time.Duration { return 0 }})
	require.NoError(t, err)
	res, err := relay.RelayOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Rejected, "the first publish failed after the commit")
	relayAll(t, relay, 2*len(sent)-res.Published)

	seen := map[string]int{}
	for _, m := range got.all() {
		seen[m.UUID]++
	}
	require.Len(t, seen, 2*len(sent), "every produced message was published")
	for id, n := range seen {
		require.Equal(t, 1, n, "%s published once", id)
	}
	require.Equal(t, int32(len(sent)), runs.Load())
}

// The lossy path, opted into: the Router publishes after the commit, and
// when that publish fails the redelivery is a Duplicate, so the produced
// messages are lost. This is why Config.Outbox is the default.
func TestPublishAfterCommitLosesOnPublishFailure(t *testing.T) {
	t.Parallel()
	s := sqliteStore(t)
	ps := newPubSub(t)
	out := newPubSub(t)
	got := collect(t, out, "receipts")
	r := newRouter(t)
	var runs atomic.Int32
	flaky := &flakyPublisher{Publisher: out}
	h := r.AddHandler("billing", "orders", ps, "receipts", flaky, produce(s, &runs))
	h.AddMiddleware(inboxwatermill.Middleware(s.client, "billing", &inboxwatermill.Config[*sql.Tx]{PublishAfterCommit: true}))
	runRouter(t, r)

	publish(t, ps, "orders", ids(1))
	require.True(t, flaky.failed.Load(), "the Router's publish failed once")
	require.Equal(t, int32(1), runs.Load(), "the redelivery was a Duplicate")
	require.Len(t, got.all(), 0, "the produced messages were lost")
}

// A handler that returns messages with no outbox fails, and its effect
// rolls back, rather than losing them.
func TestProducedWithoutOutboxFails(t *testing.T) {
	t.Parallel()
	s := sqliteStore(t)
	var runs atomic.Int32
	mw := inboxwatermill.Middleware(s.client, "billing", nil)
	msg := message.NewMessage(watermill.NewUUID(), []byte(`{}`))
	_, err := mw(produce(s, &runs))(msg)
	require.ErrorIs(t, err, inboxwatermill.ErrNoOutbox)
	require.Len(t, s.effects(t), 0, "the effect rolled back")
}

// A message whose key is missing or malformed fails before any
// transaction, naming the problem.
func TestBadKeyFails(t *testing.T) {
	t.Parallel()
	s := sqliteStore(t)
	var runs atomic.Int32
	h := inboxwatermill.Middleware(s.client, "billing", &inboxwatermill.Config[*sql.Tx]{Key: inboxwatermill.KeyMetadata("event-id")})(effectHandler(s, &runs))
	_, err := h(message.NewMessage(watermill.NewUUID(), nil))
	require.ErrorIs(t, err, inbox.ErrNoMessageID)
	m := message.NewMessage(watermill.NewUUID(), nil)
	m.Metadata.Set("event-id", "not-a-uuid")
	_, err = h(m)
	require.ErrorIs(t, err, inbox.ErrMalformedID)
	require.Equal(t, int32(0), runs.Load())
}

// The documented order, poison queue outermost, then Retry, then the
// inbox: every retry is a transaction of its own, and a message that keeps
// failing reaches the poison queue with nothing of it committed.
func TestPoisonQueueRetryInboxOrder(t *testing.T) {
	t.Parallel()
	onBothStores(t, poisonQueueRetryInbox[*sql.Tx], poisonQueueRetryInbox[pgx.Tx])
}

func poisonQueueRetryInbox[TTx any](t *testing.T, s *store[TTx]) {
	ps := newPubSub(t)
	poisoned := collect(t, ps, "poison")
	poison, err := middleware.PoisonQueue(ps, "poison")
	require.NoError(t, err)
	r := newRouter(t)
	r.AddMiddleware(poison, middleware.Retry{MaxRetries: 2, InitialInterval: time.Millisecond}.Middleware)
	var runs atomic.Int32
	effect := effectHandler(s, &runs)
	h := r.AddHandler("billing", "orders", ps, "receipts", failingPublisher{}, func(msg *message.Message) ([]*message.Message, error) {
		if _, err := effect(msg); err != nil {
			return nil, err
		}
		return nil, errors.New("always fails after its effect")
	})
	h.AddMiddleware(inboxwatermill.Middleware(s.client, "billing", nil))
	runRouter(t, r)

	sent := ids(1)
	publish(t, ps, "orders", sent)
	require.Equal(t, int32(3), runs.Load(), "the first try and two retries, each in a transaction of its own")
	require.Len(t, s.effects(t), 0, "nothing committed")
	got := poisoned.all()
	require.Len(t, got, 1)
	require.Equal(t, sent[0], got[0].UUID)
}

// The crash between the commit and the ack at the fault point the chaos
// tools use: a hook panics there, the Router recovers and nacks, as a
// consumer that died before its ack leaves the message to be delivered
// again. The redelivery is a Duplicate.
func TestFaultPointAfterCommitBeforeAck(t *testing.T) {
	t.Parallel()
	onBothStores(t, faultPointAfterCommit[*sql.Tx], faultPointAfterCommit[pgx.Tx])
}

func faultPointAfterCommit[TTx any](t *testing.T, s *store[TTx]) {
	ps := newPubSub(t)
	r := newRouter(t)
	var runs, crashes atomic.Int32
	var mu sync.Mutex
	crashed := map[string]bool{}
	armed := func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			msg.SetContext(fault.WithHook(msg.Context(), func(p fault.Point) {
				if p != fault.AfterCommitBeforeAck {
					return
				}
				mu.Lock()
				first := !crashed[msg.UUID]
				crashed[msg.UUID] = true
				mu.Unlock()
				if first {
					crashes.Add(1)
					panic("crash after the commit, before the ack")
				}
			}))
			return h(msg)
		}
	}
	h := r.AddHandler("billing", "orders", ps, "receipts", failingPublisher{}, effectHandler(s, &runs))
	h.AddMiddleware(armed, inboxwatermill.Middleware(s.client, "billing", nil))
	runRouter(t, r)

	sent := ids(5)
	publish(t, ps, "orders", sent)
	require.Equal(t, int32(len(sent)), crashes.Load(), "every message crashed once at the fault point")
	require.Equal(t, int32(len(sent)), runs.Load(), "the redeliveries were Duplicates")
	requireOnceEach(t, s.effects(t), sent)
}
