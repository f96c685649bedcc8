package inboxpgx_test

import (
	"context"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/outbox"
)

// The outbox: an order and its event commit together, and a relay
// publishes the event with the id minted at enqueue. A consumer's handler
// enqueues its own output in the transaction of its inbox row, naming the
// order's event as its cause; the redelivery of that event, a Duplicate,
// sends nothing again.
func Example_outbox() {
	client, pool, drop := exampleClient()
	defer drop()
	ctx := context.Background()
	o, err := outbox.New(client.Driver().(*inboxpgx.Driver), nil)
	if err != nil {
		log.Fatal(err)
	}

	// The producer: the business change and its event, in one transaction.
	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `UPDATE accounts SET balance_cents = balance_cents - 100 WHERE id = 1`); err != nil {
		log.Fatal(err)
	}
	ids, err := o.EnqueueTx(ctx, tx, outbox.Message{Topic: "payments", Key: []byte("acct-1"), Payload: []byte(`{"cents":100}`)})
	if err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}

	// The relay, to a sink in memory; inboxkafka.NewOutboxSink is Kafka's.
	sink := &outbox.MemorySink{}
	relay, err := o.NewRelay(sink, nil)
	if err != nil {
		log.Fatal(err)
	}
	res, err := relay.RelayOnce(ctx)
	fmt.Println("published:", res.Published, err)
	rec := sink.Records()[0]
	fmt.Println("same id:", rec.Headers[outbox.HeaderEventID] == ids[0])

	// The consumer: the event arrives twice; its output is enqueued once.
	msg := inbox.Message{ID: rec.Headers[outbox.HeaderEventID], Payload: rec.Payload}
	receipt := inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, m inbox.Message) error {
		_, err := o.EnqueueTx(ctx, tx, outbox.Message{Topic: "receipts", Payload: m.Payload, CausationID: m.ID})
		return err
	})
	for range 2 {
		outcome, err := client.Process(ctx, "receipts", msg, receipt)
		fmt.Println(outcome, err)
	}
	st, err := client.Admin().OutboxStats(ctx)
	fmt.Println("pending:", st.Pending, err)
	// Output:
	// published: 1 <nil>
	// same id: true
	// applied <nil>
	// duplicate <nil>
	// pending: 1 <nil>
}
