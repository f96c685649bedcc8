// Package outbox is the producer half of the pattern: the transactional
// outbox. A producer writes its events into an outbox table in the same
// transaction as the business change that causes them, and relays publish
// them to the broker after the commit. The event id is minted once, at
// enqueue, and every publish of the event carries it, so a consumer's
// inbox skips the republishes that crashes cause.
//
//	o, _ := outbox.New(driver, nil) // driver: *inboxpgx.Driver, *inboxsql.Driver
//	tx, _ := pool.Begin(ctx)
//	_, _ = tx.Exec(ctx, `INSERT INTO orders …`)
//	ids, err := o.EnqueueTx(ctx, tx, outbox.Message{Topic: "orders", Key: []byte(orderID), Payload: body})
//	_ = tx.Commit(ctx)
//
//	relay, _ := o.NewRelay(inboxkafka.NewOutboxSink(kafkaClient, nil), nil)
//	go relay.Run(ctx)
//
// The consumer reads the id with inbox.HeaderKey(outbox.HeaderEventID).
//
// On pgx, EnqueueBatch queues the events on the caller's *pgx.Batch beside
// the business statements, so that they cost no round trip of their own.
//
// # The relay
//
// A relay claims ready rows in a short transaction (FOR UPDATE SKIP
// LOCKED, a lease and a fencing token), publishes them outside any
// transaction, and deletes the rows the broker confirmed, presenting its
// token. Any number of relays may run. A broker's rejection of an event
// counts towards RelayConfig.MaxRejections, after which the event is
// parked for an operator; a broker that cannot be reached costs time and
// never parks an event.
//
// # Ordered mode
//
// With Config.Ordered, each event with a key gets the next sequence number
// of its key, in commit order, and relays publish a key's events in that
// order (the header HeaderKeySeq carries it). An event that fails holds
// back the later events of its key only. A key's events go to the sink one
// call at a time, each after the one before was confirmed, so a key
// publishes about one event per broker round trip; many keys publish in
// parallel. A KeyOrderSink that keeps a key's order within a call gets
// each key's ready run in one call instead, and each claim takes whole runs
// of a few keys, so that the relay's workers hold different keys. Changing
// Ordered on a table with pending events of a key does not reorder them.
//
// # Leases
//
// A relay that stalls past its lease (RelayConfig.Lease) while still
// publishing may publish events that another relay has taken over: the same
// ids again, which the consumer's inbox skips, and its write-back, fenced by
// its token, changes nothing. In ordered mode such a stall can show a
// consumer a key's earlier event again after a later one; it is a
// duplicate, never a gap. Keep the lease well above a batch's publish time,
// and the relays' clocks in step.
//
// # Inside a handler
//
// A handler of inbox.Client.Process can enqueue its outputs with the
// transaction it receives, recording the inbound message's id as
// Message.CausationID: the outputs commit with the inbox row, and a
// redelivery, which is a Duplicate, has nothing to send again.
package outbox
