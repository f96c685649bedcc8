// Package inbox makes effects from at-least-once message delivery apply
// exactly once, with the transactional inbox pattern.
//
// Brokers deliver at least once. A consumer that charges a card and dies
// before it commits its Kafka offset gets the same record again after the
// rebalance, and charges again. The inbox makes that redelivery a no-op: the
// consumer records the producer's event id in an inbox table keyed
// (consumer_name, message_id), in the same database transaction as the side
// effect, and acks the broker only after that commit.
//
// # The flow
//
// [Client.Process] runs one message through one transaction:
//
//  1. claim: INSERT INTO inbox … ON CONFLICT DO NOTHING RETURNING, as the
//     first statement (on Postgres it travels with the BEGIN);
//  2. if no row came back, this consumer already applied the id: roll back
//     and report [Duplicate]; the handler never runs;
//  3. otherwise call the [Handler] with the transaction, and commit.
//
// Ack the message after [Applied] or [Duplicate], never before: an ack
// before the commit loses the message if the process dies in between. A
// concurrent duplicate waits on the first delivery's uncommitted row (the
// unique key is the lock), then skips if it committed or applies if it
// rolled back.
//
// # Identity
//
// The key is the producer's event id, carried in a header or the payload and
// read by a [KeyFunc] such as [HeaderKey] or [JSONKey]. It is never a broker
// offset, an SQS MessageId, a hash of the payload, or an id the consumer
// mints: each of those either changes when the same event is republished or
// is shared by two different events. A message with no id, or a malformed
// one, is never applied ([ErrNoMessageID], [ErrMalformedID]); transport
// adapters send it to the dead-letter store ([Client.DeadLetter]).
//
// The key is per consumer: billing and inventory each have their own skip.
//
// # Quick start
//
//	pool, _ := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
//	driver, _ := inboxpgx.New(pool, nil)
//	client, _ := inbox.NewClient(driver, nil)
//
//	charge := inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
//		_, err := tx.Exec(ctx, `UPDATE accounts SET balance_cents = balance_cents + 100 WHERE id = $1`, 1)
//		return err
//	})
//	outcome, err := client.Process(ctx, "billing", inbox.Message{ID: eventID}, charge)
//	if err == nil {
//		ack() // Applied or Duplicate: either way this consumer is done with it.
//	}
//
// # Batches
//
// [Client.ProcessBatch] claims many ids with one statement, runs the handler
// for the new ones in order and commits once. A message whose handler fails
// is isolated by splitting the batch, so it never fails its batch-mates.
// [Client.ProcessBatchOrdered] stops at a retryable failure instead, for
// streams whose order matters.
//
// # Whose fault is a failure
//
// A failure of the inbox's own work (begin, claim, commit, the dead-letter
// write, the effects and takeover ledgers) is the store's, whatever its
// error code: permission denied, read-only after a failover, a missing
// table, a refused connection. It would hit every message, so it is never
// one of a message's attempts and never a reason to dead-letter. An error a handler
// returns is the message's, unless its transaction's connection broke or
// the handler marked it [Unavailable]; a handler's own io.EOF is the
// message's. The errors the client returns carry the [Stage] they failed
// at ([StageError]), and [Judge] applies the rule. Transport adapters share
// it through package inboxtransport, whose breaker also pauses a consumer
// when [Config.StreakLimit] distinct messages in a row fail alike.
//
// # Retention
//
// The inbox is a set of ids and it grows. [Client.Purge] and
// [Client.RunCleaner] delete rows older than a window, in bounded batches,
// and refuse a window shorter than [Config.ReplayHorizon]: a replay inside
// the horizon would look new.
//
// # Dead letters
//
// A message that will not be applied (no id, a permanent error, its attempts
// used up) is stored with its reason by [Client.DeadLetter], and then acked.
// [Client.ReplayDeadLetter] replays one with the consumer's handler. An
// operator marks dead letters for replay ('inbox deadletters replay'), and
// [Client.ReplayDeadLetters], called where the handler lives, replays the
// marked ones; the claim makes each replay apply at most once.
//
// # What it is not
//
// The inbox is a done set, not a work lease, and it holds no in-progress
// state. It does not order messages: per-entity order comes from the
// broker's partitioning. It covers what the database can roll back; remote
// calls need an idempotency key of their own.
package inbox
