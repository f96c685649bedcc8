package inboxtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/txinbox/inbox"
)

func testApplyThenSkipDuplicate[TTx any](t *testing.T, x *suite[TTx]) {
	c := x.client(nil)
	h, cs := x.effect("billing")
	id := NewID()
	RequireApplied(t)(c.Process(context.Background(), "billing", msg(id), h))
	RequireDuplicate(t)(c.Process(context.Background(), "billing", msg(id), h))
	requireEqual(t, "handler calls", len(cs.list()), 1)
	x.requireEffects("billing", id, 1)
}

func testCanonicalIDsAreOneMessage[TTx any](t *testing.T, x *suite[TTx]) {
	c := x.client(nil)
	h, cs := x.effect("billing")
	id := NewID()
	for i, form := range []string{id, strings.ToUpper(id), "{" + id + "}", "urn:uuid:" + id, strings.ReplaceAll(id, "-", "")} {
		out, err := c.Process(context.Background(), "billing", msg(form), h)
		if err != nil {
			t.Fatalf("form %q: %v", form, err)
		}
		want := inbox.Duplicate
		if i == 0 {
			want = inbox.Applied
		}
		requireEqual(t, "outcome of "+form, out, want)
	}
	requireEqual(t, "handler calls", len(cs.list()), 1)
	requireEqual(t, "id the handler saw", cs.list()[0], id)
}

func testHandlerErrorRollsBack[TTx any](t *testing.T, x *suite[TTx]) {
	c := x.client(nil)
	id := NewID()
	failing := inbox.HandlerFunc[TTx](func(ctx context.Context, tx TTx, m inbox.Message) error {
		if err := x.s.Effect(ctx, tx, "billing", m.ID); err != nil {
			return err
		}
		return errBoom
	})
	_, err := c.Process(context.Background(), "billing", msg(id), failing)
	requireErrorIs(t, err, errBoom)
	x.requireEffects("billing", id, 0)
	requireEqual(t, "inbox rows after the rollback", x.rows(c, "billing"), 0)

	h, _ := x.effect("billing")
	RequireApplied(t)(c.Process(context.Background(), "billing", msg(id), h))
	x.requireEffects("billing", id, 1)
}

func testHandlerPanicRollsBack[TTx any](t *testing.T, x *suite[TTx]) {
	c := x.client(nil)
	id := NewID()
	panicking := inbox.HandlerFunc[TTx](func(ctx context.Context, tx TTx, m inbox.Message) error {
		if err := x.s.Effect(ctx, tx, "billing", m.ID); err != nil {
			return err
		}
		panic("handler bug")
	})
	_, err := c.Process(context.Background(), "billing", msg(id), panicking)
	var pe *inbox.PanicError
	if !errors.As(err, &pe) {
		t.Fatalf("want a PanicError, got %v", err)
	}
	if !inbox.IsRetryable(err) {
		t.Fatalf("a panic should be retryable, so that it uses up attempts: %v", err)
	}
	x.requireEffects("billing", id, 0)
	h, _ := x.effect("billing")
	RequireApplied(t)(c.Process(context.Background(), "billing", msg(id), h))
}

func testPerConsumer[TTx any](t *testing.T, x *suite[TTx]) {
	c := x.client(nil)
	id := NewID()
	for _, consumer := range []string{"billing", "inventory"} {
		h, _ := x.effect(consumer)
		RequireApplied(t)(c.Process(context.Background(), consumer, msg(id), h))
	}
	for _, consumer := range []string{"billing", "inventory"} {
		h, cs := x.effect(consumer)
		RequireDuplicate(t)(c.Process(context.Background(), consumer, msg(id), h))
		requireEqual(t, consumer+" handler calls on redelivery", len(cs.list()), 0)
		x.requireEffects(consumer, id, 1)
	}
}

func testClaimTx[TTx any](t *testing.T, x *suite[TTx]) {
	c := x.client(nil)
	id := NewID()
	ctx := context.Background()
	for i, want := range []inbox.Outcome{inbox.Applied, inbox.Duplicate} {
		tx, err := x.s.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out, err := c.ClaimTx(ctx, tx, "billing", msg(id))
		if err != nil {
			t.Fatalf("delivery %d: %v", i, err)
		}
		requireEqual(t, "outcome", out, want)
		if out == inbox.Applied {
			if err := x.s.Effect(ctx, tx, "billing", id); err != nil {
				t.Fatal(err)
			}
			if err := x.s.Driver.Commit(ctx, tx); err != nil {
				t.Fatal(err)
			}
		} else if err := x.s.Driver.Rollback(ctx, tx); err != nil {
			t.Fatal(err)
		}
	}
	x.requireEffects("billing", id, 1)
}

func testErrorsSayOnceWhere[TTx any](t *testing.T, x *suite[TTx]) {
	c := x.client(nil)
	ctx := context.Background()
	boom := inbox.HandlerFunc[TTx](func(context.Context, TTx, inbox.Message) error { return errors.New("boom") })
	id := NewID()
	_, err := c.Process(ctx, "billing", msg(id), boom)
	requireEqual(t, "handler failure", fmt.Sprint(err), "inbox: handler billing/"+id+": boom")
	requireEqual(t, "judged", inbox.Judge(err), inbox.FaultMessage)
	ok, bad := NewID(), NewID()
	poison := inbox.HandlerFunc[TTx](func(_ context.Context, _ TTx, m inbox.Message) error {
		if m.ID == bad {
			return inbox.Permanent(errors.New("bad payload"))
		}
		return nil
	})
	rs, err := c.ProcessBatch(ctx, "billing", []inbox.Message{msg(ok), msg(bad)}, poison)
	if err != nil {
		t.Fatal(err)
	}
	requireEqual(t, "batch-mate", rs[0].Err, nil)
	requireEqual(t, "poison", fmt.Sprint(rs[1].Err), "inbox: handler billing/"+bad+": permanent: bad payload")
	requireEqual(t, "poison judged", inbox.Judge(rs[1].Err), inbox.FaultPermanent)
}

func testInvalidInputBeforeSQL[TTx any](t *testing.T, x *suite[TTx]) {
	counting := &countingDriver[TTx]{Driver: x.s.Driver}
	c, err := inbox.NewClient[TTx](counting, nil)
	if err != nil {
		t.Fatal(err)
	}
	h, cs := x.effect("billing")
	ctx := context.Background()
	id := NewID()
	for _, consumer := range []string{"", " billing", "billing\n", strings.Repeat("b", 129), "bill\x00ing", "bill\xffing"} {
		_, err := c.Process(ctx, consumer, msg(id), h)
		requireErrorIs(t, err, inbox.ErrInvalidConsumer)
		_, err = c.ProcessBatch(ctx, consumer, []inbox.Message{msg(id)}, h)
		requireErrorIs(t, err, inbox.ErrInvalidConsumer)
		requireErrorIs(t, c.Admin().Forget(ctx, consumer, id), inbox.ErrInvalidConsumer)
		_, err = c.Admin().ForgetCount(ctx, consumer, id)
		requireErrorIs(t, err, inbox.ErrInvalidConsumer)
	}
	for _, bad := range []struct {
		id   string
		want error
	}{{"", inbox.ErrNoMessageID}, {"42", inbox.ErrMalformedID}, {id + " ", inbox.ErrMalformedID},
		{"{" + id, inbox.ErrMalformedID}, {"00000000-0000-0000-0000-000000000000", inbox.ErrMalformedID},
		{strings.Replace(id, "-", "g", 1), inbox.ErrMalformedID}} {
		_, err := c.Process(ctx, "billing", msg(bad.id), h)
		requireErrorIs(t, err, bad.want)
		if inbox.IsRetryable(err) {
			t.Fatalf("a bad id must not be retryable: %v", err)
		}
	}
	requireEqual(t, "store calls", counting.calls.Load(), int64(0))
	requireEqual(t, "handler calls", len(cs.list()), 0)
}
