package inboxsqs_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/jackc/pgx/v5"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxsqs"
	"github.com/txinbox/inbox/inboxtest"
	"github.com/txinbox/inbox/inboxtype"
)

// The cases of the issue, (a) to (f), each counting effect rows per event id.
func TestExactlyOnce(t *testing.T) {
	t.Run("e_poison_dead_lettered_and_deleted", func(t *testing.T) {
		h := newHarness(t)
		q := h.createQueue("e", false)
		dlq := h.createQueue("e-dlq", false)
		good := inboxtest.NewID()
		permanent := inboxtest.NewID()
		failing := inboxtest.NewID()
		bodies := map[string]string{
			"good":      event{EventID: good}.Body(),
			"permanent": event{EventID: permanent, Poison: "permanent"}.Body(),
			"retryable": event{EventID: failing, Poison: "retryable"}.Body(),
			"no_id":     event{N: 7}.Body(),
			"malformed": event{EventID: "not-a-uuid"}.Body(),
			"not_json":  "garbage",
		}
		mids := map[string]string{}
		for name, body := range bodies {
			mids[name] = h.send(q, body, "")
		}
		var calls atomic.Int32
		handler := h.fx.Handler(&calls)
		cfg := h.config(q)
		cfg.DeadLetterQueueURL = dlq
		// goaws's ApproximateReceiveCount is always 1: MaxDeliveries 1
		// dead-letters a retryable failure on its first receive.
		cfg.MaxDeliveries = 1
		h.start(cfg, handler, nil)
		h.waitDrained(q)

		require.Equal(t, 1, h.fx.Count(h.t, good))
		require.Equal(t, 0, h.fx.Count(h.t, permanent), "a failed handler's effect rolled back")
		require.Equal(t, 0, h.fx.Count(h.t, failing))
		for name, mid := range mids {
			require.Equal(t, 1, h.rec.deletes(mid), "%s deleted once", name)
		}

		dls, err := h.client.Admin().DeadLetterList(context.Background(), inboxtype.DeadLetterListParams{Consumer: "billing", Limit: 100})
		require.NoError(t, err)
		reasons := map[string]string{}
		for _, d := range dls {
			require.Equal(t, inboxsqs.Transport, d.Transport)
			require.Equal(t, q, d.Queue)
			reasons[d.BrokerID] = d.Reason
			for name, mid := range mids {
				if mid == d.BrokerID {
					require.Equal(t, bodies[name], string(d.Payload), name)
				}
			}
		}
		require.Equal(t, map[string]string{
			mids["permanent"]: inbox.ReasonPermanent,
			mids["retryable"]: inbox.ReasonMaxAttempts,
			mids["no_id"]:     inbox.ReasonNoID,
			mids["malformed"]: inbox.ReasonMalformedID,
			mids["not_json"]:  inbox.ReasonMalformedID,
		}, reasons)

		// The dead-letter queue got a copy of each.
		var copies []string
		eventually(t, "five copies in the dead-letter queue", func() bool {
			out, err := h.admin.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
				QueueUrl: aws.String(dlq), MaxNumberOfMessages: 10, VisibilityTimeout: 600,
			})
			require.NoError(t, err)
			for _, m := range out.Messages {
				copies = append(copies, aws.ToString(m.Body))
			}
			return len(copies) >= 5
		})
		want := []string{bodies["permanent"], bodies["retryable"], bodies["no_id"], bodies["malformed"], bodies["not_json"]}
		sort.Strings(want)
		sort.Strings(copies)
		require.Equal(t, want, copies)
	})

	t.Run("f_fifo_group_order", func(t *testing.T) {
		h := newHarness(t)
		q := h.createQueue("f", true)
		const groups, perGroup = 3, 6
		ids := map[string]string{} // "g/n" → event id
		mids := map[string]string{}
		for n := range perGroup {
			for g := range groups {
				key := fmt.Sprintf("g%d/%d", g, n)
				ids[key] = inboxtest.NewID()
				mids[key] = h.send(q, event{EventID: ids[key], Group: fmt.Sprintf("g%d", g), N: n}.Body(), fmt.Sprintf("g%d", g))
			}
		}
		var eager atomic.Bool
		handler := inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
			e, err := h.fx.ApplyEvent(ctx, tx, msg)
			if err != nil {
				return err
			}
			switch {
			case e.Group == "g0" && e.N == 0:
				// goaws hands out a group's next message while this one
				// is in flight; hold this one until it has.
				deadline := time.Now().Add(10 * time.Second)
				for h.rec.delivered(mids["g0/1"]) == 0 && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond)
				}
				eager.Store(h.rec.delivered(mids["g0/1"]) > 0)
			case e.Group == "g1" && e.N == 2 && h.rec.delivered(mids["g1/2"]) == 1:
				// A retry in the middle of a group (every attempt of the
				// first delivery fails): the group must not move on
				// without it.
				return errors.New("try again")
			}
			return nil
		})
		cfg := h.config(q)
		cfg.Workers = 4
		h.start(cfg, handler, nil)
		h.waitDrained(q)

		require.True(t, eager.Load(), "goaws handed out g0's second message while its first was in flight")
		require.GreaterOrEqual(t, h.rec.delivered(mids["g1/2"]), 2, "the failed message was delivered again")
		for key, id := range ids {
			require.Equal(t, 1, h.fx.Count(h.t, id), key)
		}
		for g := range groups {
			order := h.fx.Order(t, fmt.Sprintf("g%d", g))
			require.Equal(t, []int{0, 1, 2, 3, 4, 5}, order, "group g%d applied in order", g)
		}
	})
}

// A message attribute can carry the event id.
func TestKeyFromMessageAttribute(t *testing.T) {
	h := newHarness(t)
	q := h.createQueue("attr", false)
	id := inboxtest.NewID()
	for range 2 {
		_, err := h.admin.SendMessage(context.Background(), &sqs.SendMessageInput{
			QueueUrl:    aws.String(q),
			MessageBody: aws.String("{}"),
			MessageAttributes: map[string]types.MessageAttributeValue{
				"event-id": {DataType: aws.String("String"), StringValue: aws.String(id)},
			},
		})
		require.NoError(t, err)
	}
	var calls atomic.Int32
	var header atomic.Value
	handler := inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
		calls.Add(1)
		header.Store(msg.Headers["event-id"])
		_, err := h.fx.ApplyEvent(ctx, tx, msg)
		return err
	})
	cfg := h.config(q)
	cfg.Key = inbox.HeaderKey("event-id")
	h.start(cfg, handler, nil)
	h.waitDrained(q)
	require.Equal(t, int32(1), calls.Load())
	require.Equal(t, id, header.Load())
	require.Equal(t, 1, h.fx.Count(h.t, id))
}

func TestShutdown(t *testing.T) {
	t.Run("fifo_releases_waiting_messages", func(t *testing.T) {
		h := newHarness(t)
		q := h.createQueue("fifo-shutdown", true)
		// Two groups, so that goaws's broken group lock hands out all four
		// while the first is in flight.
		var mids, ids []string
		for n := range 4 {
			grp := []string{"g", "h"}[n%2]
			ids = append(ids, inboxtest.NewID())
			mids = append(mids, h.send(q, event{EventID: ids[n], Group: grp, N: n}.Body(), grp))
		}
		started := make(chan struct{})
		release := make(chan struct{})
		var once sync.Once
		handler := inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
			e, err := h.fx.ApplyEvent(ctx, tx, msg)
			if err == nil && e.N == 0 {
				once.Do(func() { close(started) })
				<-release
			}
			return err
		})
		cfg := h.config(q)
		cfg.MaxBatch = 1 // one message per receive and per run
		cfg.Workers = 4  // room for four messages in hand
		r := h.start(cfg, handler, nil)
		waitClosed(t, "the first handler to start", started)
		// Received by the consumer, not only answered by goaws: a receive
		// that the shutdown cuts short leaves its messages to their
		// visibility timeout, with nothing to release.
		eventually(t, "the later messages to be received", func() bool {
			return r.hasRead(mids[3])
		})
		r.cancel()
		close(release)
		r.stop()
		require.Equal(t, 1, h.fx.Count(h.t, ids[0]), "the message in flight finished")
		require.Equal(t, 1, h.rec.deletes(mids[0]))
		for n := 1; n < 4; n++ {
			require.Equal(t, 0, h.fx.Count(h.t, ids[n]))
			requireReleased(t, h.rec.visibilities(mids[n]), "waiting message %d released", n)
		}

		// The released messages come back and are applied once each. (Not
		// in group order on goaws: a release with visibility 0 leaves its
		// group locked there, and its next receive skips the group's head
		// for a later message of the group. SQS keeps the order.)
		h.start(h.config(q), h.fx.Handler(new(atomic.Int32)), nil)
		h.waitDrained(q)
		for n := range 4 {
			require.Equal(t, 1, h.fx.Count(h.t, ids[n]))
		}
	})
}

// requireReleased checks that the last visibility change was a release
// (0), after any number of heartbeats.
func requireReleased(t *testing.T, visibilities []int32, msgAndArgs ...any) {
	t.Helper()
	require.NotEmpty(t, visibilities, msgAndArgs...)
	require.Equal(t, int32(0), visibilities[len(visibilities)-1], msgAndArgs...)
	for _, v := range visibilities[:len(visibilities)-1] {
		require.Equal(t, int32(testVisibility/time.Second), v, msgAndArgs...)
	}
}

// A heartbeat recognises the answer for a receipt handle that is no longer
// in flight, and stops extending it.
func TestNotInFlightError(t *testing.T) {
	h := newHarness(t)
	q := h.createQueue("inflight", false)
	h.send(q, event{EventID: inboxtest.NewID()}.Body(), "")
	out, err := h.admin.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(q), VisibilityTimeout: 30})
	require.NoError(t, err)
	require.Len(t, out.Messages, 1)
	_, err = h.admin.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: aws.String(q), ReceiptHandle: out.Messages[0].ReceiptHandle})
	require.NoError(t, err)
	_, err = h.admin.ChangeMessageVisibility(context.Background(), &sqs.ChangeMessageVisibilityInput{
		QueueUrl: aws.String(q), ReceiptHandle: out.Messages[0].ReceiptHandle, VisibilityTimeout: 30,
	})
	require.Error(t, err)
	require.True(t, inboxsqs.NotInFlight(err), "%v", err)
	require.False(t, inboxsqs.NotInFlight(errors.New("connection reset")))
}
