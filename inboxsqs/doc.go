// Package inboxsqs consumes an Amazon SQS queue through the inbox: each
// message is applied exactly once per consumer, and deleted only after the
// transaction that recorded it committed. It runs the delivery loop every
// transport shares (package inboxtransport); the knobs of its Config that
// every transport has are in one table in docs/TRANSPORTS.md.
//
// SQS delivers at least once. A consumer that applies a message and dies
// before DeleteMessage gets the same message again when its visibility
// timeout expires; so does one whose delete failed, and one that ran past
// the timeout. The inbox turns each of those redeliveries into a skip.
//
// # Usage
//
// Give New the application's configured *sqs.Client, an inbox client over
// the store that holds the side effects, and the handler:
//
//	consumer, err := inboxsqs.New(sqsClient, inboxClient,
//		inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
//			_, err := tx.Exec(ctx, `UPDATE accounts SET balance_cents = balance_cents + $1 WHERE id = $2`, amount, account)
//			return err
//		}),
//		&inboxsqs.Config{
//			QueueURL: queueURL,
//			Consumer: "billing",
//			Key:      inbox.JSONKey("event_id"),
//		})
//	if err != nil {
//		return err
//	}
//	return consumer.Run(ctx) // until ctx is done
//
// # Receiving and deleting
//
// Each of Config.Workers pollers long-polls ReceiveMessage for up to
// Config.MaxBatch messages and processes them as one batch
// (inbox.Client.ProcessBatch: one transaction unless a handler fails, and a
// failing message is isolated from its batch-mates). Then one
// DeleteMessageBatch deletes the messages whose transaction committed,
// applied or found to be a duplicate, and the ones that were dead-lettered.
// Nothing else is ever deleted. A failed delete is logged and left: the
// message comes back and the inbox skips it. While a batch commits, the
// poller's next long poll is already under way (at most one batch ahead,
// its messages' visibility extended like those in flight).
//
// # Visibility
//
// A message received is invisible for Config.VisibilityTimeout. While the
// consumer holds it, a heartbeat extends that back to the full timeout
// each Config.HeartbeatInterval with ChangeMessageVisibility, so that a
// slow handler does not see its message handed to another consumer
// meanwhile. A message whose handler failed with a retryable error is given
// a backoff visibility (Config.RetryBackoff, doubling per receive), not 0,
// so that a failing message does not spin.
//
// # Bounded redelivery and dead letters
//
// A message goes to the inbox's dead-letter store (inbox.Client.DeadLetter)
// and is then deleted when:
//   - its KeyFunc finds no id, or a malformed one (inbox.ReasonNoID,
//     inbox.ReasonMalformedID), at once;
//   - its handler returned an inbox.Permanent error (inbox.ReasonPermanent),
//     at once;
//   - its handler failed with a retryable error of its own on a receive
//     whose ApproximateReceiveCount, less the receives of this consumer
//     that were not attempts, reached Config.MaxDeliveries
//     (inbox.ReasonMaxAttempts);
//   - it took its consumer process down, without an error, on
//     Config.MaxCrashes receives in a row (inbox.ReasonCrashedConsumer;
//     see below).
//
// With Config.DeadLetterQueueURL a copy is also sent to that queue, after
// the store has it and before the original is deleted: a copy alone would
// leave the original looping. Whose fault a failure is decides, through
// the delivery policy that every transport adapter shares (package
// inboxtransport; see inbox.Judge). A failure that says nothing about the message never
// dead-letters it and is not an attempt: a failure of the inbox's own work
// (begin, claim, commit, the dead-letter write, a ledger) whatever its
// code, a broken connection under the handler, a failure the handler
// marked inbox.Unavailable (for these receiving also pauses, and the outage
// is logged once), inbox.ErrLockTimeout (another delivery of the event held
// its claim), cancellation at shutdown, and any failure while the streak
// breaker is open (Config.StreakLimit distinct messages in a row
// failed alike: receiving pauses, then probes).
//
// A message whose handler takes the process down without returning an
// error (an out-of-memory kill, os.Exit in a dependency) never reaches the
// adapter's bound above: the process dies before it decides. A delivery
// whose ApproximateReceiveCount is above 1, and that this process has not
// seen, is therefore run alone and marked in the store's takeover ledger;
// once it has taken Config.MaxCrashes consumers down in a row it is
// dead-lettered (inbox.ReasonCrashedConsumer) and deleted. A redrive
// policy on the queue stays a backstop: give it a maxReceiveCount above
// both Config.MaxDeliveries and Config.MaxCrashes + 1, so that the inbox's
// store gets such a message first, with why.
//
// # FIFO queues
//
// A queue whose URL ends in ".fifo" is consumed in order per
// MessageGroupId: one poller hands its messages to a sequencer, a group's
// messages are processed one batch at a time in the order they were handed
// out (inbox.Client.ProcessBatchOrdered), and different groups are
// processed in parallel by the workers. The sequencer does not rely on the
// server to hold a group back while one of its messages is in flight: a
// later message of a running group waits here. When a group's message is
// retried, the group's other held messages are handed back behind it, and
// the group takes no message until the retried one is due back. A message
// without a MessageGroupId (an emulator that does not return it) is
// treated as one group: processed strictly in order.
//
// # Keys
//
// The inbox key is the producer's event id, read by Config.Key: a field of
// the JSON body (inbox.JSONKey) or a message attribute (inbox.HeaderKey).
// Message attributes reach the handler as inbox.Message.Headers, binary
// ones in base64. MessageIDKey uses the SQS MessageId instead, as an
// explicit opt-in whose documentation says when that is wrong.
//
// # Shutdown
//
// Run returns after its context is done and its goroutines have ended. The
// messages being processed get Config.ShutdownTimeout to commit and be
// deleted; the ones received but not started are made visible at once.
package inboxsqs
