// Package inboxrabbit consumes a RabbitMQ queue through the inbox, with
// amqp091-go: each message is applied exactly once per consumer, and
// acknowledged only after the transaction that recorded it committed. It
// runs the delivery loop every transport shares (package inboxtransport);
// the knobs of its Config that every transport has are in one table in
// docs/TRANSPORTS.md.
//
// RabbitMQ delivers at least once. A consumer that applies a message and
// loses its channel before its ack reaches the broker gets the message
// again, flagged Redelivered, as does any other consumer of the queue. The
// inbox turns each of those redeliveries into a skip.
//
// # Usage
//
// Give New a DialFunc that opens the application's connection, an inbox
// client over the store that holds the side effects, and the handler:
//
//	consumer, err := inboxrabbit.New(inboxrabbit.DialURL(url, amqp.Config{}), inboxClient,
//		inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
//			_, err := tx.Exec(ctx, `UPDATE accounts SET balance_cents = balance_cents + $1 WHERE id = $2`, amount, account)
//			return err
//		}),
//		&inboxrabbit.Config{
//			Queue:    "billing.orders",
//			Consumer: "billing",
//			Key:      inbox.HeaderKey(outbox.HeaderEventID),
//		})
//	if err != nil {
//		return err
//	}
//	return consumer.Run(ctx) // until ctx is done
//
// # Consuming and acknowledging
//
// The consumer consumes with manual acks and a Qos prefetch
// (Config.Prefetch). Each of Config.Workers workers takes a delivery and
// the ones already waiting behind it, up to Config.MaxBatch (with
// Config.BatchWait, also those that arrive within that wait), and processes
// them as one batch (inbox.Client.ProcessBatch: one claim statement and
// one transaction unless a handler fails, and a failing message is
// isolated from its batch-mates). Then it acknowledges each delivery whose
// transaction committed, applied or found to be a duplicate. Nothing is
// acknowledged before its commit. Unlike the JetStream and SQS consumers, a
// worker does not take its next batch while the current one commits: the
// broker already pushes deliveries into the prefetch meanwhile, and taking
// ahead would only make the batches smaller.
//
// A delivery tag names a delivery only on the channel it arrived on, so
// each delivery remembers its channel, and is acknowledged on it or not at
// all: when that channel died, the ack is skipped, the broker has requeued
// the delivery, and the inbox skips its redelivery.
//
// # Reconnecting
//
// amqp091-go does not reconnect. When the connection or the channel is
// lost, the consumer lets the batches in progress finish (their acks are
// skipped), calls the DialFunc again with a backoff (Config.ReconnectBackoff
// doubling to Config.MaxReconnectBackoff), and consumes again.
//
// # Retries, bounded redelivery and dead letters
//
// A delivery whose handler failed with a retryable error is held for a
// backoff (Config.RetryBackoff, doubling per delivery), then requeued with
// Nack, so that a failing message does not spin through the queue. A
// message goes to the inbox's dead-letter store (inbox.Client.DeadLetter)
// and is then rejected with Nack without requeue, so that a dead-letter
// exchange configured on the queue gets it too, when:
//   - its KeyFunc finds no id, or a malformed one (inbox.ReasonNoID,
//     inbox.ReasonMalformedID), at once;
//   - its handler returned an inbox.Permanent error (inbox.ReasonPermanent),
//     at once;
//   - its handler failed with a retryable error of its own on its
//     Config.MaxDeliveries-th attempt (inbox.ReasonMaxAttempts);
//   - it took its consumer process down, without an error, on
//     Config.MaxCrashes deliveries in a row (inbox.ReasonCrashedConsumer):
//     a delivery flagged redelivered that this process has not seen runs
//     alone, marked in the store's takeover ledger (see
//     inboxtransport.Settings).
//
// The attempt is counted from the broker's count on quorum queues
// (x-delivery-count), which holds across consumers and restarts, less the
// deliveries to this process that were not attempts; on classic queues,
// which count nothing, it is this process's count of the event's failed
// attempts. Whose fault a failure is decides, through the delivery policy
// that every transport adapter shares (package inboxtransport; see
// inbox.Judge). A
// failure that says nothing about the message never dead-letters it and is
// not an attempt: a failure of the inbox's own work (begin, claim, commit,
// the dead-letter write, a ledger) whatever its code, a broken connection
// under the handler, a failure the handler marked inbox.Unavailable (for
// these consuming also pauses, and the outage is logged once),
// inbox.ErrLockTimeout (another delivery of the event held its claim),
// cancellation at shutdown, and any failure while the streak breaker is
// open (Config.StreakLimit distinct messages in a row failed alike:
// consuming pauses, then probes).
//
// # The consumer timeout
//
// RabbitMQ closes a channel whose delivery stayed unacknowledged longer
// than its consumer_timeout (30 minutes by default; consumer_timeout in
// rabbitmq.conf, or per queue from RabbitMQ 3.12). A delivery is held from
// its arrival through its wait for a worker, its transaction, and any
// retry backoff, so keep the longest of those, with Config.MaxRetryBackoff,
// well below the timeout. If it runs out all the same, the channel closes,
// the transaction still commits, its ack is skipped, the consumer
// reconnects, and the redelivery is skipped; a redelivery that arrives
// while the transaction is still open waits for its claim. There is no
// heartbeat to extend the timeout, as there is for SQS and JetStream.
//
// # Order
//
// Config.Ordered keeps the queue's order: one worker, one delivery at a
// time, prefetch 1, so that the broker sends nothing else while a delivery
// is held, and a delivery that fails with a retryable error is tried again
// in place after its backoff rather than requeued (a quorum queue puts a
// requeued message at the back; checked on RabbitMQ 3.10). That holds for
// a queue with one consumer at a time: declare it with
// x-single-active-consumer, so that several processes can run, one
// consuming. Any other configuration processes deliveries in parallel, and
// a retried delivery comes back after later ones. A delivery that the
// broker takes back from a lost channel is requeued where the queue type
// puts returns.
//
// # Keys
//
// The inbox key is the producer's event id, read by Config.Key: the
// event-id header (inbox.HeaderKey(outbox.HeaderEventID)), the message-id property
// when the producer sets it to its event id (MessageIDKey), or a field of
// the body (inbox.JSONKey). AMQP headers reach the handler as
// inbox.Message.Headers, as text.
//
// # Shutdown
//
// After Run's context is done, the deliveries being processed get
// Config.ShutdownTimeout to commit and be acknowledged; then the channel and
// the connection are closed, which requeues every delivery not
// acknowledged.
package inboxrabbit
