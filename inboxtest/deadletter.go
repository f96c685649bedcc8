package inboxtest

import (
	"context"
	"strings"
	"testing"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxtype"
)

func testDeadLetters[TTx any](t *testing.T, x *suite[TTx]) {
	c := x.client(nil)
	ctx := context.Background()
	id := NewID()
	m := inbox.Message{ID: strings.ToUpper(id), Payload: []byte(`{"amount_cents":100}`),
		Headers: map[string]string{"event-id": id},
		Source:  inbox.Source{Transport: "kafka", Queue: "orders", Partition: 3, Offset: 1207, Key: []byte("acct-1")}}
	for attempt := 1; attempt <= 2; attempt++ {
		if err := c.DeadLetter(ctx, inbox.DeadLetterParams{Consumer: "billing", Message: m, Err: errBoom, Attempts: attempt}); err != nil {
			t.Fatal(err)
		}
	}
	// Bytes that text columns refuse: the message must still be
	// dead-lettered, with the payload intact.
	noID := inbox.Message{Payload: []byte("\x00\xff{}"), Headers: map[string]string{"trace\x00": "bin\xff\x00ary"},
		Source: inbox.Source{Transport: "sqs", Queue: "q\x00", BrokerID: "m-1\xfe"}}
	if err := c.DeadLetter(ctx, inbox.DeadLetterParams{Consumer: "billing", Message: noID, Err: inbox.ErrNoMessageID, Attempts: 1}); err != nil {
		t.Fatal(err)
	}
	list, err := c.Admin().DeadLetterList(ctx, inboxtype.DeadLetterListParams{Consumer: "billing", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	requireEqual(t, "dead letters", len(list), 2)
	var withID *inboxtype.DeadLetter
	for _, d := range list {
		if d.MessageID != "" {
			withID = d
		} else {
			requireEqual(t, "reason", d.Reason, inbox.ReasonNoID)
			requireEqual(t, "payload bytes", string(d.Payload), "\x00\xff{}")
			requireEqual(t, "sanitised header", d.Headers["trace\uFFFD"], "bin\uFFFD\uFFFDary")
			requireEqual(t, "sanitised broker id", d.BrokerID, "m-1\uFFFD")
		}
	}
	if withID == nil {
		t.Fatal("the dead letter with an id is missing")
	}
	got, err := c.Admin().DeadLetterGet(ctx, withID.ID)
	if err != nil {
		t.Fatal(err)
	}
	requireEqual(t, "message id", got.MessageID, id)
	requireEqual(t, "attempts", got.Attempts, 2)
	requireEqual(t, "reason", got.Reason, inbox.ReasonMaxAttempts)
	requireEqual(t, "queue", got.Queue, "orders")
	requireEqual(t, "partition", got.Partition, int32(3))
	requireEqual(t, "offset", got.Offset, int64(1207))
	requireEqual(t, "key", string(got.Key), "acct-1")
	requireEqual(t, "header", got.Headers["event-id"], id)
	requireEqual(t, "payload", string(got.Payload), `{"amount_cents":100}`)
	if got.LastSeen.Before(got.FirstSeen) || got.FirstSeen.IsZero() {
		t.Fatalf("first seen %v, last seen %v", got.FirstSeen, got.LastSeen)
	}
	_, err = c.Admin().DeadLetterList(ctx, inboxtype.DeadLetterListParams{Consumer: "inventory", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}

	h, cs := x.effect("billing")
	RequireApplied(t)(c.ProcessDeadLetter(ctx, withID.ID, h))
	requireEqual(t, "replay handler calls", len(cs.list()), 1)
	_, err = c.Admin().DeadLetterGet(ctx, withID.ID)
	requireErrorIs(t, err, inbox.ErrNotFound)
	RequireDuplicate(t)(c.Process(ctx, "billing", msg(id), h))
	requireErrorIs(t, c.Admin().DeadLetterDelete(ctx, withID.ID), inbox.ErrNotFound)
}
