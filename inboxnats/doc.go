// Package inboxnats consumes a NATS JetStream stream through the inbox:
// each message is applied exactly once per consumer, and acknowledged only
// after the transaction that recorded it committed. It runs the delivery
// loop every transport shares (package inboxtransport); the knobs of its
// Config that every transport has are in one table in docs/TRANSPORTS.md.
//
// JetStream delivers at least once. A consumer that applies a message and
// dies before its ack gets the same message again when its AckWait runs
// out; so does one whose ack was lost, and one that ran past AckWait. The
// inbox turns each of those redeliveries into a skip.
//
// # Usage
//
// Create a pull consumer with explicit acks on the stream, then give New
// the application's JetStream context, an inbox client over the store that
// holds the side effects, and the handler:
//
//	js, err := jetstream.New(nc)
//	if err != nil {
//		return err
//	}
//	_, err = js.CreateOrUpdateConsumer(ctx, "ORDERS", jetstream.ConsumerConfig{
//		Durable:    "billing",
//		AckPolicy:  jetstream.AckExplicitPolicy,
//		AckWait:    30 * time.Second,
//		MaxDeliver: -1, // the inbox bounds redelivery (Config.MaxDeliveries)
//	})
//	if err != nil {
//		return err
//	}
//	consumer, err := inboxnats.New(js, inboxClient,
//		inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
//			_, err := tx.Exec(ctx, `UPDATE accounts SET balance_cents = balance_cents + $1 WHERE id = $2`, amount, account)
//			return err
//		}),
//		&inboxnats.Config{
//			Stream:   "ORDERS",
//			Durable:  "billing",
//			Consumer: "billing",
//			Key:      inbox.HeaderKey(outbox.HeaderEventID),
//		})
//	if err != nil {
//		return err
//	}
//	return consumer.Run(ctx) // until ctx is done
//
// # Fetching and acknowledging
//
// Each of Config.Workers workers fetches up to Config.MaxBatch messages and
// processes them as one batch (inbox.Client.ProcessBatch: one claim
// statement and one transaction unless a handler fails, and a failing
// message is isolated from its batch-mates). Then it acknowledges each
// message whose transaction committed, applied or found to be a duplicate
// (Ack, or DoubleAck with Config.DoubleAck). Nothing is acknowledged
// before its commit. A failed ack is logged and left: the message comes
// back and the inbox skips it. While a batch commits, the worker's next
// fetch is already under way (at most one batch ahead), so that the server
// and the database do not wait for each other.
//
// While the consumer holds a message, from its fetch until it is settled, a
// heartbeat sends it InProgress every Config.HeartbeatInterval (a third of the
// JetStream consumer's AckWait by default), so that a slow transaction does
// not see its message delivered to another worker meanwhile.
//
// # Retries, bounded redelivery and dead letters
//
// A message whose handler failed with a retryable error gets NakWithDelay
// with a backoff (Config.RetryBackoff, doubling per delivery), never a bare
// Nak, which the server redelivers at once whatever the consumer's BackOff.
// A message goes to the inbox's dead-letter store (inbox.Client.DeadLetter)
// and is then terminated, so that the server never delivers it again,
// when:
//   - its KeyFunc finds no id, or a malformed one (inbox.ReasonNoID,
//     inbox.ReasonMalformedID), at once;
//   - its handler returned an inbox.Permanent error (inbox.ReasonPermanent),
//     at once;
//   - its handler failed with a retryable error of its own on a delivery
//     whose NumDelivered, less the deliveries to this consumer that were
//     not attempts, reached Config.MaxDeliveries (inbox.ReasonMaxAttempts).
//     On the last delivery that the JetStream consumer's own MaxDeliver
//     allows, a failure of its own dead-letters it whatever was excused:
//     the server would not deliver it again;
//   - it took its consumer process down, without an error, on
//     Config.MaxCrashes deliveries in a row (inbox.ReasonCrashedConsumer):
//     a delivery with NumDelivered above 1 that this process has not seen
//     runs alone, marked in the store's takeover ledger (see
//     inboxtransport.Settings). With MaxDeliver -1 nothing else would end
//     that loop.
//
// It is terminated with TermWithReason on servers from 2.10.4, and with
// Term on older ones, which ignore TermWithReason and would redeliver the
// message. Whose fault a failure is decides, through the delivery policy
// that every transport adapter shares (package inboxtransport; see
// inbox.Judge). A
// failure that says nothing about the message never dead-letters it and is
// not an attempt: a failure of the inbox's own work (begin, claim, commit,
// the dead-letter write, a ledger) whatever its code, a broken connection
// under the handler, a failure the handler marked inbox.Unavailable (for
// these fetching also pauses, and the outage is logged once),
// inbox.ErrLockTimeout (another delivery of the event held its claim),
// cancellation at shutdown, and any failure while the streak breaker is
// open (Config.StreakLimit distinct messages in a row failed alike:
// fetching pauses, then probes). The deliveries that were not attempts are
// counted in this process only: a consumer that restarts counts a
// message's earlier deliveries in full.
//
// # Order
//
// A JetStream consumer with MaxAckPending 1, consumed with Config.Ordered,
// applies the stream's messages (those its filter selects) strictly in
// stream order, whatever the number of processes that pull from it: the
// server delivers nothing else while a message is unacknowledged, a retried
// message holds back the ones after it, and a dead-lettered one is
// terminated and lets the next through. No other configuration keeps
// order: with MaxAckPending above 1, or several workers, a retried message
// comes back after later ones, and batches of different workers commit in
// any order.
//
// # Keys
//
// The inbox key is the producer's event id, read by Config.Key: the
// event-id header (inbox.HeaderKey(outbox.HeaderEventID)), the Nats-Msg-Id header
// when the producer sets it to its event id (MsgIDKey), or a field of the
// payload (inbox.JSONKey). NATS headers reach the handler as
// inbox.Message.Headers, the first value of each. StreamSequenceKey uses
// the stream sequence instead, as an explicit opt-in whose documentation
// says when that is wrong.
//
// # Connection loss and shutdown
//
// The caller's NATS connection reconnects by its own options; meanwhile
// fetches fail and are retried with a backoff, and acks wait in the
// connection's reconnect buffer. A message whose ack is lost comes back
// after its AckWait and is skipped. Run returns ErrClosed when the
// connection is closed for good. After Run's context is done, the messages
// being processed get Config.ShutdownTimeout to commit and be
// acknowledged; the ones fetched but not started are released at once.
package inboxnats
