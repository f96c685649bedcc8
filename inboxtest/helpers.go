// Package inboxtest holds the conformance suite that every inbox store
// passes, and helpers for the tests of applications that use the inbox.
//
// A store's tests run the suite with Exercise, as a subtest of
// TestConformance named for the store:
//
//	func TestConformance(t *testing.T) {
//		t.Run("pgx", func(t *testing.T) {
//			inboxtest.Exercise(t, newStore)
//		})
//	}
//
// An application's tests use the helpers to check that a handler is wired
// through the inbox:
//
//	inboxtest.RequireApplied(t)(client.Process(ctx, "billing", msg, h))
//	inboxtest.RequireDuplicate(t)(client.Process(ctx, "billing", msg, h))
//
// The package uses only the standard library's testing.
package inboxtest

import (
	"context"
	"testing"
	"time"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/internal/uuid"
)

// NewID returns a new time-ordered UUID (version 7), as a producer mints
// an event id. Use it to make test events; a consumer must never mint the
// id of a message it receives.
func NewID() string { return uuid.V7(time.Now()) }

// RequireApplied returns a function that fails t unless it is given
// (inbox.Applied, nil), so that a call's two results can be passed straight
// in.
func RequireApplied(t testing.TB) func(inbox.Outcome, error) {
	return requireOutcome(t, inbox.Applied)
}

// RequireDuplicate returns a function that fails t unless it is given
// (inbox.Duplicate, nil).
func RequireDuplicate(t testing.TB) func(inbox.Outcome, error) {
	return requireOutcome(t, inbox.Duplicate)
}

func requireOutcome(t testing.TB, want inbox.Outcome) func(inbox.Outcome, error) {
	t.Helper()
	return func(got inbox.Outcome, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("want %v, got error: %v", want, err)
		}
		if got != want {
			t.Fatalf("want %v, got %v", want, got)
		}
	}
}

// RequireExactlyOnce delivers msg to h through client three times and fails
// t unless the first delivery is Applied, the other two are Duplicates, and
// h ran once.
func RequireExactlyOnce[TTx any](t testing.TB, client *inbox.Client[TTx], consumer string, msg inbox.Message, h inbox.Handler[TTx]) {
	t.Helper()
	calls := 0
	counting := inbox.HandlerFunc[TTx](func(ctx context.Context, tx TTx, m inbox.Message) error {
		calls++
		return h.Handle(ctx, tx, m)
	})
	ctx := context.Background()
	RequireApplied(t)(client.Process(ctx, consumer, msg, counting))
	RequireDuplicate(t)(client.Process(ctx, consumer, msg, counting))
	RequireDuplicate(t)(client.Process(ctx, consumer, msg, counting))
	if calls != 1 {
		t.Fatalf("handler ran %d times for %s/%s, want 1", calls, consumer, msg.ID)
	}
}
