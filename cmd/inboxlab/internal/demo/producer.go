package demo

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/cmd/inboxlab/internal/broker"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxsql"
	"github.com/txinbox/inbox/internal/fault"
	"github.com/txinbox/inbox/internal/uuid"
	"github.com/txinbox/inbox/outbox"
)

// The producer's side of the story. The events so far came with stable
// ids; here the demo makes them. A producer records each order and
// publishes a PaymentCaptured event for it, in two ways:
//
//   - outbox: the event is enqueued in the order's transaction, with an id
//     minted then; a relay dies after Kafka confirmed its first batch and
//     before it deleted the rows, and the next relay publishes that batch
//     again, with the same ids;
//   - new-id-on-retry: the event is produced after the commit, and a
//     producer whose produce timed out (Kafka had the record; the answer was
//     lost) produces it again with a new id, as code that mints the id in
//     the send does.
//
// One consumer, the same inbox consumer for both, charges each order's
// account. Only the outbox charges each order once.

// ProducerStrategies are the producer-side strategies, in the order shown.
var ProducerStrategies = []string{"outbox", "new-id-on-retry"}

// ProducerResult is the producer side of a run, in 'inboxlab demo --json'.
type ProducerResult struct {
	Orders int `json:"orders"`
	// RelayCrashes counts the relays that died after the broker confirmed
	// and before they deleted their rows; Republished the events the next
	// relay published again, with the same ids.
	RelayCrashes int `json:"relay_crashes"`
	Republished  int `json:"republished"`
	// LostAcks counts the produces whose answer the new-id-on-retry
	// producer did not get, and so sent again.
	LostAcks   int                    `json:"lost_acks"`
	Strategies []ProducerStrategyStat `json:"strategies"`
}

// ProducerStrategyStat counts what one producer strategy did to the
// consumer.
type ProducerStrategyStat struct {
	Name string `json:"name"`
	// Records is how many records the strategy put on the topic, and
	// Skipped how many of them the consumer's inbox skipped as duplicates
	// (records less charges).
	Records int `json:"records"`
	Skipped int `json:"skipped"`
	// DoubleCharged counts the extra charges of orders charged more than
	// once; Lost the orders never charged.
	DoubleCharged int  `json:"double_charged"`
	Lost          int  `json:"lost"`
	BalanceOK     bool `json:"balance_ok"`
	// Cents and WantCents are the charges, as made and as ordered.
	Cents     int64 `json:"cents"`
	WantCents int64 `json:"want_cents"`

	charges int
}

// producerOrders is how many orders each producer strategy records.
const producerOrders = 12

// lostAckEvery is which produces of the new-id-on-retry producer lose their
// answer: every lostAckEvery-th.
const lostAckEvery = 4

// payment is a PaymentCaptured event's body: the order it charges.
type payment struct {
	Order   string `json:"order"`
	Account string `json:"account"`
	Cents   int64  `json:"cents"`
}

// readDeadline bounds a read of the producer's records.
const readDeadline = time.Minute

// runProducer runs the producer side of the demo on st, on topics of its
// own on b, one per producer strategy, named after orders, the run's.
func runProducer(ctx context.Context, st *store, b broker.Broker, orders broker.Topic, s *scenario) (*ProducerResult, error) {
	d, err := inboxsql.New(st.db, engine(st.dialect), &inboxsql.Config{Tables: inboxdriver.Tables{Schema: st.schema}})
	if err != nil {
		return nil, err
	}
	client, err := inbox.NewClient(d, nil)
	if err != nil {
		return nil, err
	}
	o, err := outbox.New(d, nil)
	if err != nil {
		return nil, err
	}
	res := &ProducerResult{Orders: producerOrders}
	for _, name := range ProducerStrategies {
		t, err := b.NewTopic(ctx, orders.Name()+"-"+name, &broker.TopicConfig{Subscriptions: []string{"payments"}})
		if err != nil {
			return nil, fmt.Errorf("producer %s: %w", name, err)
		}
		payments := make([]payment, producerOrders)
		for i := range payments {
			e := s.events[i%len(s.events)]
			payments[i] = payment{Order: fmt.Sprintf("%s-order-%d", name, i+1), Account: e.Account, Cents: e.Cents}
		}
		switch name {
		case "outbox":
			err = produceWithOutbox(ctx, st, o, t, payments, res)
		default:
			err = produceNewIDOnRetry(ctx, st, t, payments, res)
		}
		if err != nil {
			return nil, fmt.Errorf("producer %s: %w", name, err)
		}
		// What the topic holds: what was sent, but where the broker drops
		// republished ids itself (JetStream).
		records, err := t.Stored(ctx)
		if err != nil {
			return nil, fmt.Errorf("producer %s: %w", name, err)
		}
		if err := consumePayments(ctx, st, client, t, name, records); err != nil {
			return nil, fmt.Errorf("producer %s: consume: %w", name, err)
		}
		stat, err := st.tallyPayments(ctx, name, payments)
		if err != nil {
			return nil, err
		}
		stat.Records = records
		stat.Skipped = records - stat.charges
		res.Strategies = append(res.Strategies, *stat)
	}
	return res, nil
}

// recordOrder writes an order in tx.
func recordOrder(ctx context.Context, st *store, tx *sql.Tx, strategy string, p payment) error {
	_, err := tx.ExecContext(ctx, st.q(`INSERT INTO orders (strategy, id, account, cents) VALUES (?, ?, ?, ?)`), strategy, p.Order, p.Account, p.Cents)
	return err
}

// produceWithOutbox records each order with its event in one transaction,
// then relays to t: the first relay dies after the broker confirmed its
// batch, the second publishes everything when the first one's lease has
// run out.
func produceWithOutbox(ctx context.Context, st *store, o *outbox.Outbox[*sql.Tx], t broker.Topic, orders []payment, res *ProducerResult) error {
	sink, err := t.OutboxSink()
	if err != nil {
		return err
	}
	for _, p := range orders {
		tx, err := st.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		body, _ := json.Marshal(p)
		if err := recordOrder(ctx, st, tx, "outbox", p); err != nil {
			_ = tx.Rollback()
			return err
		}
		if _, err := o.EnqueueTx(ctx, tx, outbox.Message{Topic: t.Name(), Key: []byte(p.Account), Payload: body}); err != nil {
			_ = tx.Rollback()
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
	}
	first, err := o.NewRelay(sink, &outbox.RelayConfig{BatchSize: producerOrders / 2})
	if err != nil {
		return err
	}
	// The first relay's goroutine ends at the fault point, after Kafka
	// confirmed and before the delete: nothing after it runs, as if its
	// process had been killed there.
	var survived bool
	died := make(chan struct{})
	go func() {
		defer close(died)
		crashCtx := fault.WithHook(ctx, func(p fault.Point) {
			if p == fault.RelayAfterPublish {
				runtime.Goexit()
			}
		})
		_, _ = first.RelayOnce(crashCtx)
		survived = true // not reached
	}()
	<-died
	if survived {
		return errors.New("the first relay did not die at its fault point")
	}
	res.RelayCrashes++
	res.Republished += producerOrders / 2
	second, err := o.NewRelay(sink, &outbox.RelayConfig{Now: func() time.Time { return time.Now().Add(outbox.DefaultLease + time.Minute) }})
	if err != nil {
		return err
	}
	published := 0
	for range producerOrders {
		r, err := second.RelayOnce(ctx)
		if err != nil {
			return err
		}
		if r.Claimed == 0 {
			break
		}
		published += r.Published
	}
	if published != producerOrders {
		return fmt.Errorf("the second relay published %d of %d events", published, producerOrders)
	}
	return nil
}

// produceNewIDOnRetry records each order, commits, and then sends its
// event to t with an id minted in the send. Every lostAckEvery-th send
// loses its answer although the broker stored the record, and the producer
// sends the event again, minting a new id.
func produceNewIDOnRetry(ctx context.Context, st *store, t broker.Topic, orders []payment, res *ProducerResult) error {
	for i, p := range orders {
		tx, err := st.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if err := recordOrder(ctx, st, tx, "new-id-on-retry", p); err != nil {
			_ = tx.Rollback()
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		body, _ := json.Marshal(p)
		for attempt := 1; attempt <= 2; attempt++ {
			if err := t.Send(ctx, broker.Message{ID: uuid.V7(time.Now()), Key: p.Account, Body: body}); err != nil {
				return err
			}
			if (i+1)%lostAckEvery != 0 || attempt == 2 {
				break
			}
			res.LostAcks++ // the answer was lost: send again
		}
	}
	return nil
}

// consumePayments reads want records from t and charges each with the
// inbox, keyed by its event id, as consumer "payments".
func consumePayments(ctx context.Context, st *store, client *inbox.Client[*sql.Tx], t broker.Topic, strategy string, want int) error {
	charge := inbox.HandlerFunc[*sql.Tx](func(ctx context.Context, tx *sql.Tx, m inbox.Message) error {
		var p payment
		if err := json.Unmarshal(m.Payload, &p); err != nil {
			return inbox.Permanent(err)
		}
		return apply(ctx, st.dialect, tx, "producer-"+strategy, "billing", event{ID: p.Order, Account: p.Account, Cents: p.Cents})
	})
	rctx, cancel := context.WithTimeout(ctx, readDeadline)
	defer cancel()
	return broker.Read(rctx, t, "payments", want, func(d *broker.Delivery) error {
		if d.ID == "" {
			return fmt.Errorf("a record without its %s header", broker.HeaderEventID)
		}
		_, err := client.Process(ctx, "payments-"+strategy, inbox.Message{ID: d.ID, Payload: d.Body}, charge)
		return err
	})
}

// tallyPayments counts the charges of strategy's orders.
func (s *store) tallyPayments(ctx context.Context, strategy string, orders []payment) (*ProducerStrategyStat, error) {
	stat := &ProducerStrategyStat{Name: strategy}
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT event_id, count(*) FROM applied WHERE strategy = ? GROUP BY event_id`), "producer-"+strategy)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	charged := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			return nil, err
		}
		charged[id] = n
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for _, p := range orders {
		stat.WantCents += p.Cents
		stat.Cents += p.Cents * int64(charged[p.Order])
		stat.charges += charged[p.Order]
		switch n := charged[p.Order]; {
		case n == 0:
			stat.Lost++
		case n > 1:
			stat.DoubleCharged += n - 1
		}
	}
	stat.BalanceOK = stat.Cents == stat.WantCents
	return stat, nil
}
