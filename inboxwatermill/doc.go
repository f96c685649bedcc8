// Package inboxwatermill adopts the inbox and the outbox in a Watermill
// application, in place:
//
//   - Middleware runs a Router handler exactly once per event: inside
//     inbox.Client.Process, with the transaction in the message's context
//     (TxFromContext), and the messages the handler returns written into
//     the outbox in that same transaction;
//   - Publisher is a message.Publisher that enqueues into the outbox, in
//     the caller's transaction;
//   - Sink lets the outbox's relays publish through any Watermill
//     publisher.
//
// A handler on Postgres:
//
//	router.AddMiddleware(middleware.PoisonQueue(pub, "poison"), middleware.Retry{MaxRetries: 5}.Middleware)
//	h := router.AddHandler("billing", "orders", sub, "receipts", pub, func(msg *message.Message) ([]*message.Message, error) {
//		tx, _ := inboxwatermill.TxFromContext[pgx.Tx](msg.Context())
//		if _, err := tx.Exec(msg.Context(), `UPDATE accounts SET …`); err != nil {
//			return nil, err
//		}
//		return []*message.Message{message.NewMessage(watermill.NewUUID(), receipt)}, nil
//	})
//	h.AddMiddleware(inboxwatermill.Middleware(client, "billing", &inboxwatermill.Config[pgx.Tx]{Outbox: ob}))
//
// # Middleware order
//
// The poison queue outermost, then Retry, then the inbox, then the
// handler. Each retry is then a transaction of its own that claims again;
// a message that keeps failing reaches the poison queue with nothing of it
// committed. Watermill wraps middlewares in the order they were added,
// router-level and handler-level alike, the first added outermost: add the
// poison queue and Retry before the inbox. Acks stay Watermill's: applied or duplicate returns no error,
// so the Router acks; a failure, or a commit whose outcome is unknown,
// returns one, so the Router nacks.
//
// # Not with the Deduplicator
//
// Do not add Watermill's Deduplicator middleware anywhere in the chain. It
// records a key in memory before the handler runs, so a handler that then
// fails has its redelivery acked unhandled (lost), and a restart forgets
// every key (applied twice). Inside this middleware's chain it can only
// lose messages; outside it, the inbox already skips duplicates, durably.
// 'inboxlab demo' shows its balance against the inbox's.
//
// # Produced messages
//
// The Router publishes a handler's messages after the handler returns,
// and nacks when that fails. Had the inbox committed first, the redelivery
// would be a Duplicate and the messages lost. So the messages go into
// Config.Outbox inside the transaction, each with the inbound key as its
// causation id, and the outbox's relays publish them. A handler that
// returns messages with no Outbox fails (ErrNoOutbox), unless
// Config.PublishAfterCommit opts in to the lossy path.
//
// # Watermill version
//
// The module requires github.com/ThreeDotsLabs/watermill v1.4.7 and works
// with v1.4.7 and later. A build that also uses watermill-sql v4, which
// needs v1.5, selects v1.5.x (the workspace does, for 'inboxlab bench'); only
// the command's module requires v1.5.1 itself.
package inboxwatermill
