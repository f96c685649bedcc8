package outbox

import (
	"context"
	"maps"

	"github.com/txinbox/inbox/inboxdriver"
)

// EnqueueObserver watches the events EnqueueTx and Enqueue write, for
// traces: set it in Config.Observer. Package inboxotel implements it.
type EnqueueObserver interface {
	// Enqueue is called for each event before it is written, with the
	// caller's context. It may add headers to e.Headers, the event's own
	// copy, which are stored with the event and published with it: a
	// tracer starts a span here and injects its context. It must be quick
	// and safe for concurrent use.
	Enqueue(ctx context.Context, e *EnqueueEvent)
}

// EnqueueEvent is one event about to be enqueued.
type EnqueueEvent struct {
	ID      string
	Topic   string
	Headers map[string]string
}

// observeEnqueue lets the observer add headers to p's rows. It does
// nothing without an observer.
func (o *Outbox[TTx]) observeEnqueue(ctx context.Context, p *inboxdriver.OutboxEnqueueParams) {
	obs := o.config.Observer
	if obs == nil {
		return
	}
	for i := range p.Rows {
		row := &p.Rows[i]
		e := EnqueueEvent{ID: row.ID, Topic: row.Topic, Headers: make(map[string]string, len(row.Headers)+2)}
		maps.Copy(e.Headers, row.Headers)
		obs.Enqueue(ctx, &e)
		row.Headers = e.Headers
	}
}
