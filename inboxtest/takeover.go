package inboxtest

import (
	"context"
	"errors"
	"testing"

	"github.com/txinbox/inbox"
)

// takeoverCases exercise the takeover ledger, with which a transport whose
// broker counts no deliveries bounds a message that crashes its consumer.
func takeoverCases[TTx any]() []testCase[TTx] {
	return []testCase[TTx]{
		{"TakeoversCountCrashesOfAStartedMessage", func(t *testing.T, x *suite[TTx]) {
			ctx := context.Background()
			c := x.client(nil)
			const src = "kafka:orders/3"
			want := func(got inbox.Takeover, err error, count int, crashed bool) {
				t.Helper()
				if err != nil {
					t.Fatalf("RecordTakeover: %v", err)
				}
				requireEqual(t, "takeover", got, inbox.Takeover{Count: count, Crashed: crashed})
			}
			start := func(consumer, source string, pos int64) {
				t.Helper()
				if err := c.StartTakeover(ctx, consumer, source, pos); err != nil {
					t.Fatalf("StartTakeover: %v", err)
				}
			}
			// A first takeover; its owner starts offset 10 and dies, twice.
			tk, err := c.RecordTakeover(ctx, "billing", src, 10)
			want(tk, err, 1, false)
			start("billing", src, 10)
			tk, err = c.RecordTakeover(ctx, "billing", src, 10)
			want(tk, err, 2, true)
			start("billing", src, 10)
			tk, err = c.RecordTakeover(ctx, "billing", src, 10)
			want(tk, err, 3, true)
			// An owner that died before starting it does not count.
			tk, err = c.RecordTakeover(ctx, "billing", src, 10)
			want(tk, err, 3, true)
			// Per consumer and per source.
			tk, err = c.RecordTakeover(ctx, "inventory", src, 10)
			want(tk, err, 1, false)
			tk, err = c.RecordTakeover(ctx, "billing", "kafka:orders/4", 10)
			want(tk, err, 1, false)
			// An owner that died further on starts the count again.
			start("billing", src, 10)
			tk, err = c.RecordTakeover(ctx, "billing", src, 11)
			want(tk, err, 1, true)
			// A clear at another position leaves the record; at its own
			// position it removes it, and the next takeover is clean.
			if err := c.TakeoverDone(ctx, "billing", src, 10); err != nil {
				t.Fatalf("TakeoverDone: %v", err)
			}
			start("billing", src, 11)
			tk, err = c.RecordTakeover(ctx, "billing", src, 11)
			want(tk, err, 2, true)
			if err := c.TakeoverDone(ctx, "billing", src, 11); err != nil {
				t.Fatalf("TakeoverDone: %v", err)
			}
			tk, err = c.RecordTakeover(ctx, "billing", src, 11)
			want(tk, err, 1, false)
			// Starting another position moves the record there with a
			// count of one: a crash then counts against it.
			start("billing", src, 15)
			tk, err = c.RecordTakeover(ctx, "billing", src, 15)
			want(tk, err, 2, true)
			// Starting a source with no record creates one.
			start("billing", "kafka:orders/9", 7)
			tk, err = c.RecordTakeover(ctx, "billing", "kafka:orders/9", 7)
			want(tk, err, 2, true)
			// A failure of the ledger is the store's (StageLedger), never
			// a message's: adapters pause for it and count no attempt.
			cancelled, cancel := context.WithCancel(ctx)
			cancel()
			_, err = c.RecordTakeover(cancelled, "billing", src, 20)
			requireStoreFault(t, "RecordTakeover", err)
			requireStoreFault(t, "StartTakeover", c.StartTakeover(cancelled, "billing", src, 20))
			requireStoreFault(t, "TakeoverDone", c.TakeoverDone(cancelled, "billing", src, 20))
			// Bad consumer names are refused before any SQL.
			if _, err := c.RecordTakeover(ctx, "", src, 1); err == nil {
				t.Fatal("RecordTakeover with an empty consumer: no error")
			}
		}},
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
