// Package inboxtransport is the delivery policy that the transport
// adapters (inboxkafka, inboxsqs, inboxnats, inboxrabbit) share, so that
// a new transport only says how to receive, ack and nack a delivery.
//
// A transport wraps each delivery it receives in its own type, which
// carries a Delivery (the message as received, with the broker's delivery
// count), and hands a batch of them to Policy.Process. The policy runs the
// KeyFunc once, processes the keyed messages as one batch through the
// inbox client, judges each failure (inbox.Judge) through a Breaker,
// dead-letters what will never be applied, and counts each message's
// attempts, leaving out the deliveries that were not attempts. It returns
// a Settlement per delivery, and the transport acts on its Verdict:
//
//	for i, s := range policy.Process(ctx, ds, ordered) {
//		switch s.Verdict {
//		case inboxtransport.Ack, inboxtransport.DeadLettered:
//			ack(ds[i])
//		case inboxtransport.Retry:
//			nakWithDelay(ds[i], s.Delay)
//		default:
//			nak(ds[i])
//		}
//	}
//
// Wait pauses the transport while the store is down or the streak breaker
// is open.
package inboxtransport
