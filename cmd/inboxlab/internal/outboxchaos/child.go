package outboxchaos

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/cmd/inboxlab/internal/broker"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxkafka"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/inboxtransport"
	"github.com/txinbox/inbox/internal/fault"
	"github.com/txinbox/inbox/internal/uuid"
	"github.com/txinbox/inbox/outbox"
)

// The roles of the child processes.
const (
	roleProducer = "producer"
	roleRelay    = "relay"
	roleConsumer = "consumer"
)

// consumerName is the consumer of the chaos run's inbox.
const consumerName = "chaos-outbox"

// childArgs are what a child needs to find the run.
type childArgs struct {
	role, databaseURL, schema string
	// where is the topic, and the consumers' group.
	where      broker.Address
	slot, keys int
}

// timings are the consumers' timings: a short session, and a member killed
// in a rebalance holds the group up to the rebalance timeout.
var timings = broker.KafkaTimings{Session: 3 * time.Second, Heartbeat: 200 * time.Millisecond, Rebalance: 5 * time.Second, FetchWait: 50 * time.Millisecond}

func (a *childArgs) flags(fs *flag.FlagSet) {
	fs.StringVar(&a.role, "role", "", "producer, relay or consumer")
	fs.StringVar(&a.databaseURL, "database-url", "", "the Postgres database")
	fs.StringVar(&a.schema, "schema", "", "the run's schema")
	a.where.Flags(fs)
	fs.IntVar(&a.slot, "slot", 0, "the child's slot among those of its role")
	fs.IntVar(&a.keys, "keys", DefaultKeys, "the number of keys the producers spread orders over")
}

func (a *childArgs) list() []string {
	return append([]string{"--role", a.role, "--database-url", a.databaseURL, "--schema", a.schema,
		"--slot", strconv.Itoa(a.slot), "--keys", strconv.Itoa(a.keys)}, a.where.Args()...)
}

// RunChild runs one life of a child process of the run: a producer, a
// relay or a consumer, until ctx ends or a fault point kills it.
func RunChild(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("chaos-outbox-child", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var a childArgs
	a.flags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := fault.ArmFromEnv(); err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, a.databaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	d, err := inboxpgx.New(pool, &inboxpgx.Config{Tables: inboxdriver.Tables{Schema: a.schema}})
	if err != nil {
		return err
	}
	switch a.role {
	case roleProducer:
		return runProducer(ctx, &a, pool, d)
	case roleRelay:
		return runRelay(ctx, &a, d)
	case roleConsumer:
		return runConsumer(ctx, &a, pool, d)
	}
	return fmt.Errorf("unknown role %q", a.role)
}

// runProducer records orders, each with its event enqueued in the same
// transaction under the order's own id, until ctx ends. Each slot numbers
// its orders; the keys rotate, so every key gets orders from every slot.
func runProducer(ctx context.Context, a *childArgs, pool *pgxpool.Pool, d *inboxpgx.Driver) error {
	o, err := outbox.New(d, &outbox.Config{Ordered: true})
	if err != nil {
		return err
	}
	orders := pgx.Identifier{a.schema, "orders"}.Sanitize()
	backoff := time.Duration(0)
	for n := 0; ctx.Err() == nil; n++ {
		id := uuid.V7(time.Now())
		key := fmt.Sprintf("k%d", (a.slot+n)%a.keys)
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO `+orders+` (id, key) VALUES ($1, $2)`, id, key); err != nil {
				return err
			}
			if _, err := o.EnqueueTx(ctx, tx, outbox.Message{ID: id, Topic: a.where.Topic, Key: []byte(key), Payload: []byte(`{"order":"` + id + `"}`)}); err != nil {
				return err
			}
			fault.Inject(ctx, fault.OutboxAfterEnqueue)
			return nil
		})
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil && d.Classify(err) == inboxdriver.ClassConflict:
			continue // a deadlock between two keys' sequences: the order was not recorded
		case err != nil && d.Classify(err) != inboxdriver.ClassOther:
			// A database fault of the run: its session terminated, INSERT
			// revoked, the database read-only. The order may or may not
			// be recorded (a lost commit); either way the next one is a
			// business transaction of its own, with an id of its own.
			backoff = min(max(2*backoff, 10*time.Millisecond), 500*time.Millisecond)
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			continue
		case err != nil:
			return err
		}
		backoff = 0
		o.Wake()
	}
	return nil
}

// runRelay relays to Kafka until ctx ends, with a short lease, so that a
// killed relay's rows come back soon.
func runRelay(ctx context.Context, a *childArgs, d *inboxpgx.Driver) error {
	cl, err := a.where.KafkaClient()
	if err != nil {
		return err
	}
	defer cl.Close()
	r, err := outbox.NewRelay(d, inboxkafka.NewOutboxSink(cl), &outbox.RelayConfig{
		Lease: relayLease, PollInterval: 50 * time.Millisecond, Workers: 2,
	})
	if err != nil {
		return err
	}
	return r.Run(ctx)
}

// relayLease is the relays' lease: short, so that a killed relay's rows are
// published again within the run.
const relayLease = 2 * time.Second

// runConsumer applies the orders' events through the inbox: one effect row
// per application, with the key and its sequence number, in the claim's
// transaction.
func runConsumer(ctx context.Context, a *childArgs, pool *pgxpool.Pool, d *inboxpgx.Driver) error {
	client, err := inbox.NewClient(d, nil)
	if err != nil {
		return err
	}
	effects := pgx.Identifier{a.schema, "effects"}.Sanitize()
	h := inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, m inbox.Message) error {
		seq, err := strconv.ParseInt(m.Headers[outbox.HeaderKeySeq], 10, 64)
		if err != nil {
			return inbox.Permanent(fmt.Errorf("header %s: %w", outbox.HeaderKeySeq, err))
		}
		_, err = tx.Exec(ctx, `INSERT INTO `+effects+` (event_id, key, key_seq) VALUES ($1, $2, $3)`, m.ID, string(m.Source.Key), seq)
		return err
	})
	cl, err := a.where.InboxKafkaClient(timings)
	if err != nil {
		return err
	}
	c, err := inboxkafka.New(cl, client, h, &inboxkafka.Config{
		Consumer: consumerName, Key: inbox.HeaderKey(outbox.HeaderEventID),
		Settings: inboxtransport.Settings{MaxBatch: 50, RetryBackoff: time.Millisecond, MaxRetryBackoff: 50 * time.Millisecond},
	})
	defer cl.Close()
	if err != nil {
		return err
	}
	err = c.Run(ctx)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
