// Package inboxtransport is the delivery loop that the transport adapters
// (inboxkafka, inboxsqs, inboxnats, inboxrabbit) run, so that an adapter
// says only how its broker receives, acknowledges, rejects, retries,
// releases and extends a delivery.
//
// An adapter implements a Source over its broker client and runs a Loop
// over it:
//
//	loop, err := inboxtransport.NewLoop(inboxtransport.LoopConfig[pgx.Tx, *delivery]{
//		Name: "inboxfoo", Client: client, Handler: handler,
//		Consumer: cfg.Consumer, Key: cfg.Key, Settings: cfg.Settings,
//	})
//	…
//	return loop.Run(ctx, source) // Receive, Ack, Reject, Retry, Release (and Extend)
//
// Each worker of the Loop receives a batch, keys it, claims and handles it
// in one transaction (Policy), and settles each delivery once, after the
// commit, by its Verdict: ack, reject (a dead letter), retry after a
// delay, or release. While a batch commits, the worker's next batch is
// already being received: at most one batch ahead, held and extended like
// the one in flight, never acknowledged before its own commit. The Loop
// extends what it holds (Extender), processes the dead letters an operator
// marked for replay, pauses while the store is down or the streak breaker
// is open (Breaker), and, when Run's context is done, releases what it
// received and did not start and gives the batches in flight
// Settings.ShutdownTimeout to finish. A transport that schedules its
// deliveries itself (Kafka's partitions, SQS FIFO's message groups) runs
// them in the Loop's frame (RunFunc) and settles each batch through
// Handle.
//
// Settings are the knobs every transport's Config shares, embedded in each:
// one name, default, validation and meaning everywhere. docs/TRANSPORTS.md
// has them in one table, with what each broker makes of them.
//
// Package transporttest is the conformance suite every transport passes.
package inboxtransport
