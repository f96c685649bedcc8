// Package txcount is an inbox.Observer for tests that sums what the
// client's transactions report.
package txcount

import (
	"context"
	"sync"

	"github.com/txinbox/inbox"
)

// Observer sums the TxEvents of a client. Set it in inbox.Config.Observer.
type Observer struct {
	mu sync.Mutex
	n  Tally
}

// Tally is what an Observer summed.
type Tally struct {
	// Txs is how many transactions ended, Messages how many messages they
	// held, and MaxMessages the most one held.
	Txs, Messages, MaxMessages int
	// Duplicates, split by reason as TxEvent splits them.
	Duplicates, Redelivered, Republished int
}

// TxStart returns ctx.
func (o *Observer) TxStart(ctx context.Context, _ string, _ []inbox.Message) context.Context {
	return ctx
}

// TxEnd adds e to the tally.
func (o *Observer) TxEnd(_ context.Context, e *inbox.TxEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.n.Txs++
	o.n.Messages += e.Messages
	o.n.MaxMessages = max(o.n.MaxMessages, e.Messages)
	o.n.Duplicates += e.Duplicates
	o.n.Redelivered += e.Redelivered
	o.n.Republished += e.Republished
}

// DeadLettered does nothing.
func (o *Observer) DeadLettered(context.Context, *inbox.DeadLetterEvent) {}

// Get returns the tally so far.
func (o *Observer) Get() Tally {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n
}
