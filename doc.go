// Package inbox makes effects from at-least-once message delivery apply
// exactly once, with the transactional inbox pattern: the consumer records
// the producer's event id in an inbox table, keyed (consumer_name,
// message_id), in the same database transaction as the side effect, and
// acks the broker only after that commit. A redelivery finds the row and
// is a [Duplicate]; its handler never runs.
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
// [Client.Process] and [Client.ProcessBatch] run messages through the
// claim, the [Handler] and the commit; a [KeyFunc] reads the producer's
// event id; [Judge] says whose fault a failure is; [Admin] (a client's
// is [Client.Admin]) holds the operator's side (statistics, dead letters,
// purges); the transport
// adapters (inboxkafka, inboxsqs, inboxnats, inboxrabbit) and the stores
// (inboxpgx, inboxsql) are packages of their own. docs/DESIGN.md explains
// the design.
package inbox
