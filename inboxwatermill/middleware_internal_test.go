package inboxwatermill

import (
	"context"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/txinbox/inbox"
)

// direct is a processor that runs the handler at once, with no store: what
// is left is the middleware's own work.
type direct struct{}

func (direct) Process(ctx context.Context, _ string, msg inbox.Message, h inbox.Handler[int]) (inbox.Outcome, error) {
	return inbox.Applied, h.Handle(ctx, 1, msg)
}

// BenchmarkMiddlewareOverhead measures what the middleware adds to a
// message around Client.Process: the key, the inbox message, the context
// with the transaction. Compare it with a transaction's time (inboxlab bench's
// inbox-handler row: about a millisecond).
func BenchmarkMiddlewareOverhead(b *testing.B) {
	h := middleware[int](direct{}, "bench", nil)(func(msg *message.Message) ([]*message.Message, error) {
		if _, ok := TxFromContext[int](msg.Context()); !ok {
			b.Fatal("no transaction")
		}
		return nil, nil
	})
	msg := message.NewMessage("0190a2b4-6f6e-7c3a-9d1e-5b2f3c4d5e6f", []byte(`{}`))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := h(msg); err != nil {
			b.Fatal(err)
		}
	}
}
