package inboxsqs_test

import (
	"context"
	"encoding/json"
	"log"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/inboxsqs"
)

// A billing consumer: the credit and the inbox row commit together, and
// the SQS message is deleted only after that commit.
func Example() {
	ctx := context.Background()
	// Usually sqs.NewFromConfig(cfg), with cfg from aws-sdk-go-v2/config.
	sqsClient := sqs.New(sqs.Options{Region: "eu-west-1"})
	pool, err := pgxpool.New(ctx, "postgres://localhost/billing")
	if err != nil {
		log.Fatal(err)
	}
	driver, err := inboxpgx.New(pool, nil)
	if err != nil {
		log.Fatal(err)
	}
	client, err := inbox.NewClient[pgx.Tx](driver, nil)
	if err != nil {
		log.Fatal(err)
	}
	credit := inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
		var order struct {
			Account     int64 `json:"account_id"`
			AmountCents int64 `json:"amount_cents"`
		}
		if err := json.Unmarshal(msg.Payload, &order); err != nil {
			return inbox.Permanent(err) // dead-lettered at once
		}
		_, err := tx.Exec(ctx, `UPDATE accounts SET balance_cents = balance_cents + $1 WHERE id = $2`,
			order.AmountCents, order.Account)
		return err
	})
	consumer, err := inboxsqs.New(sqsClient, client, credit, &inboxsqs.Config{
		QueueURL: "https://sqs.eu-west-1.amazonaws.com/123456789012/order-placed",
		Consumer: "billing",
		Key:      inbox.JSONKey("event_id"), // the producer's outbox id
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := consumer.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
