// Command kafka is the quick start on Kafka: an inboxkafka consumer over
// Postgres, and an event that the producer published twice. It runs a Kafka
// broker in process (franz-go's kfake) unless KAFKA_BROKERS names a real
// cluster, whose broker must create the topic "orders" or have it already.
//
//	DATABASE_URL=postgres://postgres@localhost:5432/postgres go run .
//	DATABASE_URL=… KAFKA_BROKERS=localhost:9092 go run .
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxkafka"
	"github.com/txinbox/inbox/inboxmigrate"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/inboxtransport"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := run(ctx, os.Stdout, os.Getenv("DATABASE_URL"), os.Getenv("KAFKA_BROKERS")); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, w io.Writer, databaseURL, brokers string) error {
	seeds, closeBroker, err := brokerSeeds(brokers)
	if err != nil {
		return err
	}
	defer closeBroker()
	pool, err := pgxpool.New(ctx, databaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	client, err := setUpStore(ctx, pool)
	if err != nil {
		return err
	}
	pending, err := publish(ctx, seeds)
	if err != nil {
		return err
	}
	if err := consume(ctx, w, seeds, client, pending); err != nil {
		return err
	}

	var balance int64
	if err := pool.QueryRow(ctx, `SELECT balance_cents FROM accounts WHERE id = 2`).Scan(&balance); err != nil {
		return err
	}
	fmt.Fprintf(w, "balance of account 2: %d cents\n", balance)
	return nil
}

// brokerSeeds returns the addresses of the brokers named in brokers, or of
// a broker started in process when brokers is empty, and the function that
// stops that broker.
func brokerSeeds(brokers string) ([]string, func(), error) {
	if brokers != "" {
		return strings.Split(brokers, ","), func() {}, nil
	}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"))
	if err != nil {
		return nil, nil, err
	}
	return cluster.ListenAddrs(), cluster.Close, nil
}

// setUpStore migrates the inbox's schema, creates the application's table,
// and returns the inbox client over the pool.
func setUpStore(ctx context.Context, pool *pgxpool.Pool) (*inbox.Client[pgx.Tx], error) {
	driver, err := inboxpgx.New(pool, nil)
	if err != nil {
		return nil, err
	}
	migrator, err := inboxmigrate.New(driver)
	if err != nil {
		return nil, err
	}
	if _, err := migrator.Up(ctx); err != nil {
		return nil, err
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS accounts (id bigint PRIMARY KEY, balance_cents bigint NOT NULL);
INSERT INTO accounts VALUES (2, 0) ON CONFLICT DO NOTHING`); err != nil {
		return nil, err
	}
	return inbox.NewClient(driver, nil)
}

// credit is the handler: it credits an order's amount to its account, in
// the transaction that records the event.
var credit = inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
	var order struct {
		Account     int64 `json:"account"`
		AmountCents int64 `json:"amount_cents"`
	}
	if err := json.Unmarshal(msg.Payload, &order); err != nil {
		return inbox.Permanent(err)
	}
	_, err := tx.Exec(ctx, `UPDATE accounts SET balance_cents = balance_cents + $1 WHERE id = $2`,
		order.AmountCents, order.Account)
	return err
})

// offset is a record's place in the topic.
type offset struct {
	partition int32
	offset    int64
}

// publish is the producer: it puts its event id, a UUID, in a header. It
// published the first event twice (its relay retried after a lost
// confirmation). publish returns the records' offsets.
func publish(ctx context.Context, seeds []string) (map[offset]bool, error) {
	producer, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic("orders"), kgo.AllowAutoTopicCreation())
	if err != nil {
		return nil, err
	}
	defer producer.Close()
	pending := map[offset]bool{}
	for _, e := range []struct{ id, body string }{
		{"0190c8e6-51a0-7b2c-9d3e-4f5a6b7c8d90", `{"account":2,"amount_cents":2500}`},
		{"0190c8e6-51a0-7b2c-9d3e-4f5a6b7c8d90", `{"account":2,"amount_cents":2500}`},
		{"0190c8e7-0c11-7d22-8e33-9f44a055b166", `{"account":2,"amount_cents":1000}`},
	} {
		rec := &kgo.Record{Value: []byte(e.body), Headers: []kgo.RecordHeader{{Key: "event-id", Value: []byte(e.id)}}}
		r, err := producer.ProduceSync(ctx, rec).First()
		if err != nil {
			return nil, err
		}
		pending[offset{r.Partition, r.Offset}] = true
	}
	return pending, nil
}

// consume runs the consumer until it has processed the pending records.
func consume(ctx context.Context, w io.Writer, seeds []string, client *inbox.Client[pgx.Tx], pending map[offset]bool) error {
	// README: begin consumer
	// The consumer: kgo with the options inboxkafka needs (no auto-commit),
	// and the KeyFunc that reads the event id.
	cl, err := kgo.NewClient(append(inboxkafka.ClientOpts(),
		kgo.SeedBrokers(seeds...),
		kgo.ConsumerGroup("billing"),
		kgo.ConsumeTopics("orders"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var mu sync.Mutex
	consumer, err := inboxkafka.New(cl, client, credit, &inboxkafka.Config{
		Consumer: "billing",
		Key:      inbox.HeaderKey("event-id"),
		Settings: inboxtransport.Settings{OnResult: func(r inboxkafka.Result) {
			if r.Err != nil {
				return // retried, and dead-lettered after Config.MaxDeliveries
			}
			mu.Lock()
			defer mu.Unlock()
			fmt.Fprintf(w, "offset %d: %v\n", r.Message.Source.Offset, r.Outcome) // applied, duplicate, applied
			delete(pending, offset{r.Message.Source.Partition, r.Message.Source.Offset})
			if len(pending) == 0 {
				stop() // this run's records are done
			}
		}},
	})
	if err != nil {
		return err
	}
	// Run commits each record's offset only after its transaction committed.
	if err := consumer.Run(runCtx); err != nil {
		return err
	}
	// README: end consumer
	mu.Lock()
	left := len(pending)
	mu.Unlock()
	if left > 0 {
		return fmt.Errorf("stopped with %d of the records unprocessed: %w", left, ctx.Err())
	}
	return nil
}
