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

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxsqs"
	"github.com/txinbox/inbox/inboxtest"
	"github.com/txinbox/inbox/internal/fault"
	"github.com/txinbox/inbox/internal/require"
)

// crashAt returns a Run context wrapper whose hook runs crash once, the
// first time the consumer reaches point.
func crashAt(point fault.Point, crash func(*running)) func(*running, context.Context) context.Context {
	var once sync.Once
	return func(r *running, ctx context.Context) context.Context {
		return fault.WithHook(ctx, func(p fault.Point) {
			if p == point {
				once.Do(func() { crash(r) })
			}
		})
	}
}

// The cases of the issue, (a) to (f), each counting effect rows per event id.
func TestExactlyOnce(t *testing.T) {
	t.Run("a_crash_after_commit_before_delete", func(t *testing.T) {
		h := newHarness(t)
		q := h.createQueue("a", false)
		id := inboxtest.NewID()
		mid := h.send(q, event{EventID: id}.body(), "")
		var calls atomic.Int32

		crashed := make(chan struct{})
		first := h.start(h.config(q), h.effectHandler(&calls), crashAt(fault.AfterCommitBeforeAck, func(r *running) {
			r.cutNetwork()
			close(crashed)
		}))
		waitClosed(t, "the first consumer to commit", crashed)
		first.stop()
		require.Equal(t, 1, h.effectCount(id), "the first delivery committed")
		require.Equal(t, 0, h.rec.deletes(mid), "the crashed consumer must not have deleted the message")
		require.Equal(t, 1, h.queued(q), "the message is still in the queue")

		h.start(h.config(q), h.effectHandler(&calls), nil)
		h.waitDrained(q)
		h.waitDeleted(mid)
		require.GreaterOrEqual(t, h.rec.delivered(mid), 2, "the message was delivered again")
		require.Equal(t, 1, h.rec.deletes(mid))
		require.Equal(t, int32(1), calls.Load(), "the redelivery was skipped: the handler did not run again")
		require.Equal(t, 1, h.effectCount(id))
	})

	t.Run("b_crash_before_commit", func(t *testing.T) {
		h := newHarness(t)
		q := h.createQueue("b", false)
		id := inboxtest.NewID()
		mid := h.send(q, event{EventID: id}.body(), "")
		var calls atomic.Int32
		var backend atomic.Uint32
		handler := inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
			calls.Add(1)
			var pid uint32
			if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
				return err
			}
			backend.Store(pid)
			_, err := h.applyEffect(ctx, tx, msg)
			return err
		})

		crashed := make(chan struct{})
		first := h.start(h.config(q), handler, crashAt(fault.AfterEffectBeforeCommit, func(r *running) {
			r.cutNetwork()
			// The process "dies" with its transaction open: Postgres
			// ends the session and rolls the effect back.
			var ok bool
			err := h.pool.QueryRow(context.Background(), `SELECT pg_terminate_backend($1, 10000)`, backend.Load()).Scan(&ok)
			if err != nil || !ok {
				t.Errorf("terminate backend %d: %v, %v", backend.Load(), ok, err)
			}
			close(crashed)
		}))
		waitClosed(t, "the first consumer to apply the effect", crashed)
		first.stop()
		require.Equal(t, 0, h.effectCount(id), "the crash rolled the effect back")
		require.Equal(t, 0, h.rec.deletes(mid))

		h.start(h.config(q), handler, nil)
		h.waitDrained(q)
		require.GreaterOrEqual(t, h.rec.delivered(mid), 2)
		require.Equal(t, int32(2), calls.Load(), "the redelivery applied it")
		require.Equal(t, 1, h.effectCount(id))
	})

	t.Run("c_same_event_two_message_ids", func(t *testing.T) {
		h := newHarness(t)
		q := h.createQueue("c", false)
		id := inboxtest.NewID()
		// The producer retried its send: two messages, one event.
		mid1 := h.send(q, event{EventID: id}.body(), "")
		mid2 := h.send(q, event{EventID: id}.body(), "")
		require.NotEqual(t, mid1, mid2)
		var calls atomic.Int32
		cfg := h.config(q)
		cfg.MaxMessages = 1 // so that two workers can take one each
		h.start(cfg, h.effectHandler(&calls), nil)
		h.waitDrained(q)
		h.waitDeleted(mid1, mid2)
		require.Equal(t, 1, h.rec.delivered(mid1))
		require.Equal(t, 1, h.rec.delivered(mid2))
		require.Equal(t, 1, h.rec.deletes(mid1))
		require.Equal(t, 1, h.rec.deletes(mid2))
		require.Equal(t, int32(1), calls.Load())
		require.Equal(t, 1, h.effectCount(id))
	})

	t.Run("d_heartbeat_outlives_visibility_timeout", func(t *testing.T) {
		h := newHarness(t)
		q := h.createQueue("d", false)
		id := inboxtest.NewID()
		mid := h.send(q, event{EventID: id}.body(), "")
		var calls atomic.Int32
		started := make(chan struct{})
		release := make(chan struct{})
		handler := inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
			if calls.Add(1) == 1 {
				close(started)
			}
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
			_, err := h.applyEffect(ctx, tx, msg)
			return err
		})
		cfg := h.config(q)
		cfg.Workers = 4 // idle workers keep polling while the handler runs
		h.start(cfg, handler, nil)
		waitClosed(t, "the handler to start", started)
		began := time.Now()
		// Hold the handler for well over the visibility timeout, until
		// heartbeats have extended the message twice.
		eventually(t, "the handler to run past the visibility timeout with heartbeats", func() bool {
			require.Equal(t, 1, h.rec.delivered(mid), "no second worker may receive the message meanwhile")
			return time.Since(began) > 5*testVisibility/2 && h.rec.heartbeats(mid) >= 2
		})
		require.Equal(t, 1, h.rec.delivered(mid), "no second worker received the message meanwhile")
		close(release)
		h.waitDrained(q)
		h.waitDeleted(mid)
		require.Equal(t, 1, h.rec.delivered(mid))
		require.Equal(t, 1, h.rec.deletes(mid))
		require.Equal(t, int32(1), calls.Load())
		require.Equal(t, 1, h.effectCount(id))
	})

	t.Run("e_poison_dead_lettered_and_deleted", func(t *testing.T) {
		h := newHarness(t)
		q := h.createQueue("e", false)
		dlq := h.createQueue("e-dlq", false)
		good := inboxtest.NewID()
		permanent := inboxtest.NewID()
		failing := inboxtest.NewID()
		bodies := map[string]string{
			"good":      event{EventID: good}.body(),
			"permanent": event{EventID: permanent, Poison: "permanent"}.body(),
			"retryable": event{EventID: failing, Poison: "retryable"}.body(),
			"no_id":     event{N: 7}.body(),
			"malformed": event{EventID: "not-a-uuid"}.body(),
			"not_json":  "garbage",
		}
		mids := map[string]string{}
		for name, body := range bodies {
			mids[name] = h.send(q, body, "")
		}
		var calls atomic.Int32
		handler := inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
			calls.Add(1)
			e, err := h.applyEffect(ctx, tx, msg)
			if err != nil {
				return err
			}
			switch e.Poison {
			case "permanent":
				return inbox.Permanent(errors.New("amount is negative"))
			case "retryable":
				return errors.New("downstream says no")
			}
			return nil
		})
		cfg := h.config(q)
		cfg.DeadLetterQueueURL = dlq
		// goaws's ApproximateReceiveCount is always 1: MaxReceives 1
		// dead-letters a retryable failure on its first receive.
		cfg.MaxReceives = 1
		h.start(cfg, handler, nil)
		h.waitDrained(q)

		require.Equal(t, 1, h.effectCount(good))
		require.Equal(t, 0, h.effectCount(permanent), "a failed handler's effect rolled back")
		require.Equal(t, 0, h.effectCount(failing))
		for name, mid := range mids {
			require.Equal(t, 1, h.rec.deletes(mid), "%s deleted once", name)
		}

		dls, err := h.client.ListDeadLetters(context.Background(), inbox.ListDeadLettersParams{Consumer: "billing", Limit: 100})
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
				mids[key] = h.send(q, event{EventID: ids[key], Group: fmt.Sprintf("g%d", g), N: n}.body(), fmt.Sprintf("g%d", g))
			}
		}
		var eager atomic.Bool
		handler := inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
			e, err := h.applyEffect(ctx, tx, msg)
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
			require.Equal(t, 1, h.effectCount(id), key)
		}
		for g := range groups {
			rows, err := h.pool.Query(context.Background(), `SELECT n FROM `+h.effects+` WHERE grp = $1 ORDER BY seq`, fmt.Sprintf("g%d", g))
			require.NoError(t, err)
			order, err := pgx.CollectRows(rows, pgx.RowTo[int])
			require.NoError(t, err)
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
		_, err := h.applyEffect(ctx, tx, msg)
		return err
	})
	cfg := h.config(q)
	cfg.Key = inbox.HeaderKey("event-id")
	h.start(cfg, handler, nil)
	h.waitDrained(q)
	require.Equal(t, int32(1), calls.Load())
	require.Equal(t, id, header.Load())
	require.Equal(t, 1, h.effectCount(id))
}

// inbox.ErrUnavailable is never poison, even at MaxReceives: the message
// gets a backoff visibility (not 0) and is applied when it comes back.
func TestUnavailableIsNeverDeadLettered(t *testing.T) {
	h := newHarness(t)
	q := h.createQueue("unavailable", false)
	id := inboxtest.NewID()
	mid := h.send(q, event{EventID: id}.body(), "")
	var calls atomic.Int32
	handler := inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
		if calls.Add(1) == 1 {
			return fmt.Errorf("the ledger database: %w", inbox.ErrUnavailable)
		}
		_, err := h.applyEffect(ctx, tx, msg)
		return err
	})
	cfg := h.config(q)
	cfg.MaxReceives = 1
	h.start(cfg, handler, nil)
	h.waitDrained(q)
	require.Equal(t, int32(2), calls.Load())
	require.Equal(t, 2, h.rec.delivered(mid))
	require.Contains(t, h.rec.visibilities(mid), int32(inboxsqs.DefaultRetryBackoff/time.Second), "a backoff visibility was set")
	require.NotContains(t, h.rec.visibilities(mid), int32(0))
	dls, err := h.client.ListDeadLetters(context.Background(), inbox.ListDeadLettersParams{Consumer: "billing", Limit: 10})
	require.NoError(t, err)
	require.Empty(t, dls)
	require.Equal(t, 1, h.effectCount(id))
}

func TestShutdown(t *testing.T) {
	t.Run("in_flight_message_finishes_and_is_deleted", func(t *testing.T) {
		h := newHarness(t)
		q := h.createQueue("graceful", false)
		id := inboxtest.NewID()
		mid := h.send(q, event{EventID: id}.body(), "")
		started := make(chan struct{})
		release := make(chan struct{})
		handler := inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
			close(started)
			<-release
			_, err := h.applyEffect(ctx, tx, msg)
			return err
		})
		r := h.start(h.config(q), handler, nil)
		waitClosed(t, "the handler to start", started)
		r.cancel()
		close(release)
		r.stop() // Run returns nil and leaves no goroutine behind
		require.Equal(t, 1, h.rec.deletes(mid))
		require.Equal(t, 1, h.effectCount(id))
		require.Equal(t, 0, h.queued(q))
	})

	t.Run("timeout_cancels_and_releases", func(t *testing.T) {
		h := newHarness(t)
		q := h.createQueue("timeout", false)
		id := inboxtest.NewID()
		mid := h.send(q, event{EventID: id}.body(), "")
		started := make(chan struct{})
		var calls atomic.Int32
		handler := inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
			if calls.Add(1) == 1 {
				if _, err := h.applyEffect(ctx, tx, msg); err != nil {
					return err
				}
				close(started)
				<-ctx.Done() // a handler that does not finish in time
				return ctx.Err()
			}
			_, err := h.applyEffect(ctx, tx, msg)
			return err
		})
		cfg := h.config(q)
		cfg.ShutdownTimeout = -1
		r := h.start(cfg, handler, nil)
		waitClosed(t, "the handler to start", started)
		r.stop()
		require.Equal(t, 0, h.effectCount(id), "the cancelled transaction rolled back")
		requireReleased(t, h.rec.visibilities(mid), "the message was released at once")
		require.Equal(t, 0, h.rec.deletes(mid))

		h.start(h.config(q), handler, nil)
		h.waitDrained(q)
		require.Equal(t, 1, h.effectCount(id))
	})

	t.Run("fifo_releases_waiting_messages", func(t *testing.T) {
		h := newHarness(t)
		q := h.createQueue("fifo-shutdown", true)
		// Two groups, so that goaws's broken group lock hands out all four
		// while the first is in flight.
		var mids, ids []string
		for n := range 4 {
			grp := []string{"g", "h"}[n%2]
			ids = append(ids, inboxtest.NewID())
			mids = append(mids, h.send(q, event{EventID: ids[n], Group: grp, N: n}.body(), grp))
		}
		started := make(chan struct{})
		release := make(chan struct{})
		var once sync.Once
		handler := inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
			e, err := h.applyEffect(ctx, tx, msg)
			if err == nil && e.N == 0 {
				once.Do(func() { close(started) })
				<-release
			}
			return err
		})
		cfg := h.config(q)
		cfg.MaxMessages = 1 // one message per receive and per run
		cfg.Workers = 4     // room for four messages in hand
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
		require.Equal(t, 1, h.effectCount(ids[0]), "the message in flight finished")
		require.Equal(t, 1, h.rec.deletes(mids[0]))
		for n := 1; n < 4; n++ {
			require.Equal(t, 0, h.effectCount(ids[n]))
			requireReleased(t, h.rec.visibilities(mids[n]), "waiting message %d released", n)
		}

		// The released messages come back and are applied once each. (Not
		// in group order on goaws: a release with visibility 0 leaves its
		// group locked there, and its next receive skips the group's head
		// for a later message of the group. SQS keeps the order.)
		h.start(h.config(q), h.effectHandler(new(atomic.Int32)), nil)
		h.waitDrained(q)
		for n := range 4 {
			require.Equal(t, 1, h.effectCount(ids[n]))
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
	h.send(q, event{EventID: inboxtest.NewID()}.body(), "")
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
