package inboxprom_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxprom"
)

// BenchmarkObserver times TxStart and TxEnd for a batch of 100 messages:
// the observer's cost per transaction, to divide by 100 for its cost per
// message.
func BenchmarkObserver(b *testing.B) {
	obs, err := inboxprom.New(inboxprom.Config{Registerer: prometheus.NewRegistry()})
	if err != nil {
		b.Fatal(err)
	}
	msgs := make([]inbox.Message, 100)
	b.ReportAllocs()
	ctx := context.Background()
	for b.Loop() {
		tctx := obs.TxStart(ctx, "billing", msgs)
		obs.TxEnd(tctx, &inbox.TxEvent{Consumer: "billing", Messages: 100, Applied: 99, Duplicates: 1, Redelivered: 1, Claim: time.Millisecond, Handler: time.Millisecond, Commit: time.Millisecond})
	}
}
