// Package inboxkafka consumes Kafka through franz-go's kgo client and applies
// each record's effects exactly once, through an inbox.Client: the record's
// event id is claimed in the same transaction as the handler's side effects,
// and the record's offset is committed only after that transaction commits.
// Its partitions' workers and rebalances are its own; each batch is
// processed and settled through the delivery loop every transport shares
// (package inboxtransport), and the knobs of its Config that every
// transport has are in one table in docs/TRANSPORTS.md.
//
// A consumer that dies after the commit and before the offset commit gets
// the record again after the rebalance, as Kafka promises; the inbox finds
// its id and skips it.
//
// # Usage
//
//	opts := append(inboxkafka.ClientOpts(),
//		kgo.SeedBrokers("localhost:9092"),
//		kgo.ConsumerGroup("billing"),
//		kgo.ConsumeTopics("orders"),
//	)
//	cl, err := kgo.NewClient(opts...)
//	if err != nil { ... }
//	defer cl.Close()
//
//	c, err := inboxkafka.New(cl, inboxClient, handler, &inboxkafka.Config{
//		Consumer: "billing",
//		Key:      inbox.HeaderKey("event-id"),
//	})
//	if err != nil { ... }
//	err = c.Run(ctx) // until ctx is cancelled
//
// # Client options
//
// The caller builds the kgo client. New checks that it cannot commit an
// offset behind the consumer's back, and names the option that is wrong:
// auto-commit must be off (kgo.DisableAutoCommit) or limited to marked
// records (kgo.AutoCommitMarks, which the consumer never marks), and
// kgo.BlockRebalanceOnPoll must be on. ClientOpts returns these options
// together with the rebalance callbacks the consumer needs; do not replace
// those callbacks with your own.
//
// # Order and batches
//
// Each assigned partition has its own worker, and partitions are processed
// in parallel. A worker processes its partition's records in offset order,
// up to Config.MaxBatch of them in one transaction, through
// inbox.Client.ProcessBatchOrdered: a retryable failure stops the batch
// there, and the records after it wait, so the partition holds its place.
// Per-key order therefore holds for keys that the producer partitions on.
//
// # Offsets
//
// A record is done when its transaction committed (Applied), when the
// inbox already had its id (Duplicate), or when it was dead-lettered. The
// offset one past the last record done, with no record before it left
// undone, is marked; a separate goroutine commits the marked offsets with
// CommitOffsetsSync. kgo does not retry a failed commit, so the consumer
// retries it with backoff until it succeeds or the partition is revoked.
//
// # Rebalances
//
// On a revoke, the consumer stops the revoked partitions' workers from taking
// new work, lets their transactions in flight finish (after
// Config.ShutdownTimeout it abandons them, and they roll back), commits the
// offsets of what the database committed, and only then lets the rebalance
// go on. It retries a failed commit up to Config.ShutdownTimeout, but not once
// the group has said it no longer knows this member in this generation: the
// next owner then gets the records again, and finds them duplicates. On lost
// partitions (the group no longer knows this member), it abandons their
// transactions and commits nothing. Each assignment of a
// partition has a generation; a mark from an earlier assignment's worker is
// dropped.
//
// A member that dies without leaving the group (a crash, SIGKILL, an
// out-of-memory kill) is removed when its session times out
// (kgo.SessionTimeout). If it dies during a rebalance, the classic group
// protocol waits for it up to the rebalance timeout (kgo.RebalanceTimeout,
// 60s by default), and no member consumes meanwhile. Where consumers crash
// often, shorten the rebalance timeout, keeping it above twice
// Config.ShutdownTimeout so that a revoke can finish.
//
// Another member may begin a partition before the last owner finished with
// it, when the last owner was lost or its drain timed out. The inbox keeps
// that from applying any record twice: the claim of an id in flight waits for
// the other transaction, and is then a Duplicate.
//
// # Failures
//
// A retryable handler error is retried in process, with capped exponential
// backoff (Config.RetryBackoff, Config.MaxRetryBackoff), while the partition waits.
// A record is dead-lettered, then committed past, when its handler failed
// Config.MaxDeliveries times, at once when it failed with inbox.Permanent, and
// at once when its KeyFunc finds no id or a malformed one (the KeyFunc runs
// before processing, through inbox.Client.Key). Dead-lettering stores the
// record in the inbox's dead-letter table with its topic, partition, offset,
// key, headers, payload, reason and attempts, and, with
// Config.DeadLetterTopic, produces a copy to that topic.
//
// Whose fault a failure is decides, through the delivery policy that every
// transport adapter shares (package inboxtransport; see inbox.Judge). A failure of the
// inbox's own work (begin, claim, commit, the dead-letter write, the
// effects and takeover ledgers), whatever its code, a handler's failure
// after which its transaction's connection was broken, and a failure the
// handler marked inbox.Unavailable are not the record's: the partition pauses with backoff and tries again, without
// counting an attempt and without ever dead-lettering for it; the outage is
// logged once. A handler's own io.EOF or net.Error is the record's. When
// Config.StreakLimit distinct records in a row fail alike, the streak
// breaker pauses every partition and probes instead of using up their
// attempts (Consumer.Breaker shows its state).
//
// # Records that crash the consumer
//
// A handler can take the whole process down without returning an error: an
// out-of-memory kill on a huge payload, a panic on a goroutine it started, a
// segfault in a cgo library, os.Exit in a dependency. Kafka counts no
// deliveries, and the attempts above live in memory, so such a record would
// crash every owner of its partition forever. The consumer keeps a durable
// count in the store's takeover ledger (migration 004, inbox_takeovers):
// one write when it takes a partition, one when it stops cleanly, none per
// record. After Config.MaxCrashes takeovers in a row that found the record
// first and the owner before gone down, the record is dead-lettered with
// inbox.ReasonCrashedConsumer, without running its handler, its attempts
// being the crash count, and the partition moves on. After any crash the
// next owner processes 2×MaxBatch records one at a time, so that the crash
// is pinned to its record and the records around it are applied. Replaying
// the dead letter runs the handler again, deliberately.
//
// # Keys
//
// Config.Key, the KeyFunc that reads the producer's event id, is required:
// there is no default. OffsetKey, which names a record by its coordinates, is
// an opt-in whose documentation says when it lies.
//
// # Shutdown
//
// Run returns when its context is cancelled, after it has finished or
// abandoned the transactions in flight, committed what the database
// committed, and allowed rebalances. Close the client afterwards; Run leaves
// no goroutine behind.
package inboxkafka
