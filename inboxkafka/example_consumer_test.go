package inboxkafka_test

import (
	"context"
	"fmt"
	"os"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxkafka"
	"github.com/txinbox/inbox/inboxmigrate"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/inboxtransport"
	"github.com/txinbox/inbox/internal/testdb"
)

// A billing consumer credits an account for each OrderPlaced record. The
// outbox relay published one event twice, at two offsets: the account is
// credited once.
func ExampleConsumer() {
	ctx := context.Background()

	// A Kafka broker in process, and the test database.
	cluster, _ := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"))
	defer cluster.Close()
	url := os.Getenv("TEST_DATABASE_URL")
	if url == "" {
		url = testdb.DefaultURL
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	schema := "inbox_example_" + testdb.RandomSuffix()
	_, _ = pool.Exec(ctx, `CREATE SCHEMA `+schema)
	defer pool.Exec(ctx, `DROP SCHEMA `+schema+` CASCADE`)
	_, _ = pool.Exec(ctx, `CREATE TABLE `+schema+`.accounts (id int PRIMARY KEY, balance_cents int NOT NULL)`)
	_, _ = pool.Exec(ctx, `INSERT INTO `+schema+`.accounts VALUES (7, 0)`)

	driver, _ := inboxpgx.New(pool, &inboxpgx.Config{Tables: inboxdriver.Tables{Schema: schema}})
	migrator, _ := inboxmigrate.New(driver)
	if _, err := migrator.Up(ctx); err != nil {
		fmt.Println(err)
		return
	}
	client, _ := inbox.NewClient[pgx.Tx](driver, nil)

	// The handler's side effect, in the inbox's transaction.
	credit := inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
		_, err := tx.Exec(ctx, `UPDATE `+schema+`.accounts SET balance_cents = balance_cents + 500 WHERE id = 7`)
		return err
	})

	// The producer: the same event id twice, then another event.
	producer, _ := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.DefaultProduceTopic("orders"))
	defer producer.Close()
	for _, id := range []string{
		"0b0d3c4e-59a1-4f55-9a57-3c1d8a4b9e01",
		"0b0d3c4e-59a1-4f55-9a57-3c1d8a4b9e01",
		"7f3e2d1c-0b9a-4876-8543-210fedcba987",
	} {
		rec := &kgo.Record{Value: []byte(`{"type":"OrderPlaced"}`), Headers: []kgo.RecordHeader{{Key: "event-id", Value: []byte(id)}}}
		if err := producer.ProduceSync(ctx, rec).FirstErr(); err != nil {
			fmt.Println(err)
			return
		}
	}

	// The consumer.
	cl, err := kgo.NewClient(append(inboxkafka.ClientOpts(),
		kgo.SeedBrokers(cluster.ListenAddrs()...),
		kgo.ConsumerGroup("billing"),
		kgo.ConsumeTopics("orders"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)...)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cl.Close()
	var wg sync.WaitGroup
	wg.Add(3)
	consumer, err := inboxkafka.New(cl, client, credit, &inboxkafka.Config{
		Consumer: "billing",
		Key:      inbox.HeaderKey("event-id"),
		Settings: inboxtransport.Settings{OnResult: func(r inboxkafka.Result) {
			if r.Err == nil {
				fmt.Printf("offset %d: %v\n", r.Message.Source.Offset, r.Outcome)
				wg.Done()
			}
		}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- consumer.Run(runCtx) }()
	wg.Wait()
	stop()
	if err := <-done; err != nil {
		fmt.Println(err)
	}

	var balance int
	_ = pool.QueryRow(ctx, `SELECT balance_cents FROM `+schema+`.accounts WHERE id = 7`).Scan(&balance)
	fmt.Println("balance:", balance)
	// Output:
	// offset 0: applied
	// offset 1: duplicate
	// offset 2: applied
	// balance: 1000
}
