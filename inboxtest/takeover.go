package inboxtest

import (
	"context"
	"errors"
	"testing"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxtransport"
)

// takeoverCases exercise the takeover ledger, with which a transport whose
// broker counts no deliveries bounds a message that crashes its consumer.
func takeoverCases[TTx any]() []testCase[TTx] {
	return []testCase[TTx]{
		{"TakeoversCountCrashesOfAStartedMessage", testTakeoversCountCrashesOfAStartedMessage[TTx]},
	}
}

// requireStoreFault checks that err is a failure of the inbox's own work,
// which inbox.Judge classes as the store's.
func requireStoreFault(t *testing.T, what string, err error) {
	t.Helper()
	var se *inbox.StageError
	switch {
	case err == nil:
		t.Fatalf("%s on a cancelled context: no error", what)
	case !errors.As(err, &se) || se.Stage != inbox.StageLedger:
		t.Fatalf("%s: %v: not tagged with StageLedger", what, err)
	case inbox.Judge(err) != inbox.FaultStore:
		t.Fatalf("%s: %v: judged %v, want %v", what, err, inbox.Judge(err), inbox.FaultStore)
	}
}

func testTakeoversCountCrashesOfAStartedMessage[TTx any](t *testing.T, x *suite[TTx]) {
	ctx := context.Background()
	c := x.client(nil)
	led := func(consumer string) *inboxtransport.Ledger {
		t.Helper()
		l, err := inboxtransport.NewLedger(c, consumer)
		if err != nil {
			t.Fatalf("NewLedger: %v", err)
		}
		return l
	}
	const src = "kafka:orders/3"
	want := func(got inboxtransport.Takeover, err error, count int, crashed bool) {
		t.Helper()
		if err != nil {
			t.Fatalf("Ledger.Record: %v", err)
		}
		requireEqual(t, "takeover", got, inboxtransport.Takeover{Count: count, Crashed: crashed})
	}
	start := func(consumer, source string, pos int64) {
		t.Helper()
		if err := led(consumer).Start(ctx, source, pos); err != nil {
			t.Fatalf("Ledger.Start: %v", err)
		}
	}
	// A first takeover; its owner starts offset 10 and dies, twice.
	tk, err := led("billing").Record(ctx, src, 10)
	want(tk, err, 1, false)
	start("billing", src, 10)
	tk, err = led("billing").Record(ctx, src, 10)
	want(tk, err, 2, true)
	start("billing", src, 10)
	tk, err = led("billing").Record(ctx, src, 10)
	want(tk, err, 3, true)
	// An owner that died before starting it does not count.
	tk, err = led("billing").Record(ctx, src, 10)
	want(tk, err, 3, true)
	// Per consumer and per source.
	tk, err = led("inventory").Record(ctx, src, 10)
	want(tk, err, 1, false)
	tk, err = led("billing").Record(ctx, "kafka:orders/4", 10)
	want(tk, err, 1, false)
	// An owner that died further on starts the count again.
	start("billing", src, 10)
	tk, err = led("billing").Record(ctx, src, 11)
	want(tk, err, 1, true)
	// A clear at another position leaves the record; at its own
	// position it removes it, and the next takeover is clean.
	if err := led("billing").Done(ctx, src, 10); err != nil {
		t.Fatalf("Ledger.Done: %v", err)
	}
	start("billing", src, 11)
	tk, err = led("billing").Record(ctx, src, 11)
	want(tk, err, 2, true)
	if err := led("billing").Done(ctx, src, 11); err != nil {
		t.Fatalf("Ledger.Done: %v", err)
	}
	tk, err = led("billing").Record(ctx, src, 11)
	want(tk, err, 1, false)
	// Starting another position moves the record there with a
	// count of one: a crash then counts against it.
	start("billing", src, 15)
	tk, err = led("billing").Record(ctx, src, 15)
	want(tk, err, 2, true)
	// Starting a source with no record creates one.
	start("billing", "kafka:orders/9", 7)
	tk, err = led("billing").Record(ctx, "kafka:orders/9", 7)
	want(tk, err, 2, true)
	// A failure of the ledger is the store's (StageLedger), never
	// a message's: adapters pause for it and count no attempt.
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = led("billing").Record(cancelled, src, 20)
	requireStoreFault(t, "Ledger.Record", err)
	requireStoreFault(t, "Ledger.Start", led("billing").Start(cancelled, src, 20))
	requireStoreFault(t, "Ledger.Done", led("billing").Done(cancelled, src, 20))
	// Bad consumer names are refused before any SQL.
	if _, err := inboxtransport.NewLedger(c, ""); err == nil {
		t.Fatal("NewLedger with an empty consumer: no error")
	}
}
