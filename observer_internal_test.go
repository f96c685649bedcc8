package inbox

import (
	"context"
	"testing"
)

type txRecorder struct{ events []TxEvent }

func (r *txRecorder) TxStart(ctx context.Context, _ string, _ []Message) context.Context {
	return ctx
}
func (r *txRecorder) TxEnd(_ context.Context, e *TxEvent)            { r.events = append(r.events, *e) }
func (r *txRecorder) DeadLettered(context.Context, *DeadLetterEvent) {}

func TestTxEventSplitsDuplicatesByReason(t *testing.T) {
	rec := &txRecorder{}
	c := &Client[struct{}]{admin: &Admin{config: Config{Observer: rec}}, config: Config{Observer: rec}}
	msgs := []Message{
		{ID: "a"}, // first delivery: applied
		{ID: "b"}, // first delivery, already applied: republish
		{ID: "c", Source: Source{Redelivered: true}}, // redelivered: lost ack
		{ID: "d", Source: Source{Attempt: 3}},        // attempt count says redelivered
	}
	ctx, obs := c.observeTx(context.Background(), "billing", msgs)
	obs.end(ctx, []Outcome{Applied, Duplicate, Duplicate, Duplicate}, false, nil)
	if len(rec.events) != 1 {
		t.Fatalf("got %d events, want 1", len(rec.events))
	}
	e := rec.events[0]
	if e.Applied != 1 || e.Duplicates != 3 || e.Republished != 1 || e.Redelivered != 2 || e.Concurrent != 0 {
		t.Fatalf("event %+v: want applied 1, duplicates 3 = republished 1 + redelivered 2", e)
	}
	// A claim that followed a conflict: its duplicates were in flight.
	ctx, obs = c.observeTx(context.Background(), "billing", msgs)
	obs.end(ctx, []Outcome{Applied, Duplicate, Duplicate, Duplicate}, true, nil)
	if e := rec.events[1]; e.Duplicates != 3 || e.Concurrent != 3 {
		t.Fatalf("event %+v: want 3 duplicates, all concurrent", e)
	}
	if got := duplicateReason(&msgs[1], true); got != DuplicateConcurrent {
		t.Fatalf("a claim that waited for a copy: got %v, want concurrent", got)
	}
	for r, want := range map[DuplicateReason]string{DuplicateRepublish: "republish", DuplicateRedelivery: "redelivery", DuplicateConcurrent: "concurrent"} {
		if r.String() != want {
			t.Fatalf("%d.String() = %q, want %q", r, r.String(), want)
		}
	}
}
