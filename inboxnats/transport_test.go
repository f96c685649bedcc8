package inboxnats_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txinbox/inbox/inboxnats"
	"github.com/txinbox/inbox/inboxpgx/inboxpgxtest"
	"github.com/txinbox/inbox/inboxtransport"
	"github.com/txinbox/inbox/inboxtransport/transporttest"
	"github.com/txinbox/inbox/internal/testdb"
	"github.com/txinbox/inbox/outbox"
)

// TestTransport runs the transport conformance suite on the machine's
// JetStream server.
func TestTransport(t *testing.T) { transporttest.Exercise(t, transport) }

// transport is the suite's harness: a stream and a pull consumer of its
// own per queue on the machine's server, with AckWait testAckWait.
var transport = inboxpgxtest.Transport("nats", transporttest.Features{Ordered: true, HoldTime: testAckWait, ProcessCrash: true, MaxCrashes: inboxtransport.DefaultMaxCrashes}, newQueue, openQueue)

// testAckWait is the AckWait of the tests: short, so that redeliveries
// come quickly; every wait on it polls a condition with a deadline.
const testAckWait = 2 * time.Second

// queue is a stream with one pull consumer, Durable.
type queue struct {
	url, stream, subject, durable string
	nc                            *nats.Conn
	js                            jetstream.JetStream
}

func newQueue(t testing.TB, opts transporttest.QueueOptions) transporttest.Queue[pgx.Tx] {
	srv := machineServer(t)
	suffix := testdb.RandomSuffix()
	q, err := openQueue(strings.Join([]string{srv.url, "INBOXTEST_" + suffix, "inboxtest." + suffix, "billing"}, "|"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(q.(*queue).nc.Close)
	ctx := context.Background()
	_, err = q.(*queue).js.CreateStream(ctx, jetstream.StreamConfig{
		Name:     q.(*queue).stream,
		Subjects: []string{q.(*queue).subject + ".>"},
		Storage:  jetstream.FileStorage,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := q.(*queue).js.DeleteStream(ctx, q.(*queue).stream); err != nil {
			t.Logf("delete stream %s: %v", q.(*queue).stream, err)
		}
	})
	cc := jetstream.ConsumerConfig{
		Durable:    "billing",
		AckPolicy:  jetstream.AckExplicitPolicy,
		AckWait:    testAckWait,
		MaxDeliver: -1,
	}
	if opts.Ordered {
		cc.MaxAckPending = 1
	}
	if _, err := q.(*queue).js.CreateOrUpdateConsumer(ctx, q.(*queue).stream, cc); err != nil {
		t.Fatal(err)
	}
	return q
}

// openQueue opens the queue named "url|stream|subject|durable".
func openQueue(name string) (transporttest.Queue[pgx.Tx], error) {
	parts := strings.Split(name, "|")
	if len(parts) != 4 {
		return nil, errors.New("inboxnats test: malformed queue name " + name)
	}
	nc, err := nats.Connect(parts[0], nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		return nil, err
	}
	return &queue{url: parts[0], stream: parts[1], subject: parts[2], durable: parts[3], nc: nc, js: jetstreamOf(nc)}, nil
}

func (q *queue) Name() string {
	return strings.Join([]string{q.url, q.stream, q.subject, q.durable}, "|")
}

func (q *queue) Publish(ctx context.Context, msgs ...transporttest.Message) error {
	for _, m := range msgs {
		nm := nats.NewMsg(q.subject + ".events")
		nm.Data = m.Body
		if m.ID != "" {
			nm.Header.Set(outbox.HeaderEventID, m.ID)
		}
		if _, err := q.js.PublishMsgAsync(nm); err != nil {
			return err
		}
	}
	select {
	case <-q.js.PublishAsyncComplete():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (q *queue) Consumer(opts transporttest.ConsumerOptions[pgx.Tx]) (transporttest.Runner, error) {
	nc, err := nats.Connect(q.url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		return nil, err
	}
	cfg := &inboxnats.Config{
		Stream:    q.stream,
		Durable:   q.durable,
		Consumer:  opts.Consumer,
		Key:       opts.Key,
		FetchWait: 500 * time.Millisecond,
		Ordered:   opts.Ordered,
		Settings:  opts.Settings,
	}
	if opts.Ordered {
		cfg.Workers, cfg.MaxBatch = 1, 1
	}
	c, err := inboxnats.New(jetstreamOf(nc), opts.Client, opts.Handler, cfg)
	if err != nil {
		nc.Close()
		return nil, err
	}
	if opts.ReceiveAhead != nil {
		inboxnats.ReceiveAhead(c, *opts.ReceiveAhead)
	}
	return transporttest.Closing(c.Run, nc.Close), nil
}

func (q *queue) Depth(ctx context.Context) (int, error) {
	cons, err := q.js.Consumer(ctx, q.stream, q.durable)
	if err != nil {
		return 0, err
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return 0, err
	}
	return int(info.NumPending) + info.NumAckPending, nil
}

// BenchmarkReceiveAhead measures the consumer with its next batch received
// while the current one commits, and without (see transporttest.Benchmark).
func BenchmarkReceiveAhead(b *testing.B) { transporttest.Benchmark(b, transport) }
