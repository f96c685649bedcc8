package demo

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txinbox/inbox/inboxnats"
	"github.com/txinbox/inbox/internal/testdb"
)

// NATS timings. A message a consumer held when it crashed comes back when
// its AckWait runs out: short, so that the demo is quick.
const (
	// naiveAckWait is the AckWait of the hand-written consumers' durables.
	naiveAckWait = 2 * time.Second
	// inboxAckWait is the AckWait of the inbox consumers' durables; their
	// heartbeat keeps a message held while it is processed.
	inboxAckWait = 2 * time.Second
)

// natsBroker is a JetStream stream of the run: on a server embedded in
// this process (a temporary store directory, a loopback port), or on the
// server at a URL. Each strategy's consumer has a durable pull consumer of
// its own, which holds at most batchSize messages unacknowledged: what a
// crashed consumer held comes back, in order, before anything after it,
// as a Kafka consumer group restarts from its committed offset.
type natsBroker struct {
	srv     *server.Server // nil on a server at a URL
	dir     string
	url     string
	nc      *nats.Conn
	js      jetstream.JetStream
	stream  string
	subject string
}

func newNATS(ctx context.Context, url string) (*natsBroker, error) {
	suffix := testdb.RandomSuffix()
	n := &natsBroker{url: url, stream: "INBOX_DEMO_" + strings.ToUpper(suffix), subject: "inbox.demo." + suffix}
	if url == "" {
		if err := n.start(); err != nil {
			n.close()
			return nil, err
		}
	}
	var err error
	n.nc, err = nats.Connect(n.url, nats.Timeout(5*time.Second))
	if err != nil {
		n.close()
		return nil, fmt.Errorf("demo: cannot reach NATS at %s: %w", n.url, err)
	}
	n.js, err = jetstream.New(n.nc)
	if err == nil {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_, err = n.js.CreateStream(cctx, jetstream.StreamConfig{
			Name: n.stream, Subjects: []string{n.subject}, Storage: jetstream.FileStorage,
		})
	}
	if err != nil {
		n.close()
		return nil, fmt.Errorf("demo: create the JetStream stream on %s: %w", n.url, err)
	}
	return n, nil
}

// start starts the embedded server.
func (n *natsBroker) start() error {
	dir, err := os.MkdirTemp("", "inbox-demo-nats-")
	if err != nil {
		return err
	}
	n.dir = dir
	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: dir,
		NoLog: true, NoSigs: true,
	})
	if err != nil {
		return fmt.Errorf("demo: embedded NATS server: %w", err)
	}
	go srv.Start()
	n.srv = srv
	if !srv.ReadyForConnections(30 * time.Second) {
		return errors.New("demo: the embedded NATS server did not start in 30s")
	}
	n.url = srv.ClientURL()
	return nil
}

func (n *natsBroker) kind() string {
	if n.srv != nil {
		return "in-process NATS JetStream"
	}
	return "NATS JetStream at " + n.url
}

// produce publishes the records in order, each acknowledged by the stream.
func (n *natsBroker) produce(ctx context.Context, records []event) error {
	for _, e := range records {
		msg := nats.NewMsg(n.subject)
		msg.Data = e.body()
		msg.Header.Set(inboxnats.HeaderEventID, e.ID)
		if _, err := n.js.PublishMsg(ctx, msg); err != nil {
			return fmt.Errorf("demo: publish: %w", err)
		}
	}
	return nil
}

// durable creates, or finds, the durable pull consumer name.
func (n *natsBroker) durable(ctx context.Context, name string, ackWait time.Duration) (jetstream.Consumer, error) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := n.js.CreateOrUpdateConsumer(cctx, n.stream, jetstream.ConsumerConfig{
		Durable:       name,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		MaxAckPending: batchSize,
		MaxDeliver:    -1,
	})
	if err != nil {
		return nil, fmt.Errorf("demo: create the JetStream consumer %s: %w", name, err)
	}
	return c, nil
}

// subscribe starts a life on the strategy's durable, on a connection of
// its own, which a crash closes.
func (n *natsBroker) subscribe(ctx context.Context, strategy, consumer string) (subscription, error) {
	if _, err := n.durable(ctx, "demo-"+strategy+"-"+consumer, naiveAckWait); err != nil {
		return nil, err
	}
	nc, err := nats.Connect(n.url)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	var c jetstream.Consumer
	if err == nil {
		c, err = js.Consumer(ctx, n.stream, "demo-"+strategy+"-"+consumer)
	}
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &natsSub{nc: nc, c: c}, nil
}

func (n *natsBroker) inboxArgs(ctx context.Context, consumer string) ([]string, error) {
	durable := "demo-inbox-" + consumer
	if _, err := n.durable(ctx, durable, inboxAckWait); err != nil {
		return nil, err
	}
	return []string{"--nats-url", n.url, "--stream", n.stream, "--durable", durable}, nil
}

func (n *natsBroker) close() {
	if n.nc != nil {
		if n.srv == nil && n.js != nil {
			// A server at a URL keeps nothing of the run.
			dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = n.js.DeleteStream(dctx, n.stream)
			cancel()
		}
		n.nc.Close()
	}
	if n.srv != nil {
		n.srv.Shutdown()
		n.srv.WaitForShutdown()
	}
	if n.dir != "" {
		os.RemoveAll(n.dir)
	}
}

// natsSub is a life of a hand-written consumer on its durable.
type natsSub struct {
	nc *nats.Conn
	c  jetstream.Consumer
}

func (s *natsSub) poll(ctx context.Context) ([]*record, error) {
	batch, err := s.c.Fetch(batchSize, jetstream.FetchMaxWait(500*time.Millisecond))
	if err != nil {
		return nil, err
	}
	var out []*record
	for m := range batch.Messages() {
		md, err := m.Metadata()
		if err != nil {
			return nil, err
		}
		out = append(out, &record{
			index: int(md.Sequence.Stream) - 1,
			key:   fmt.Sprintf("%s/%d", md.Stream, md.Sequence.Stream),
			id:    m.Headers().Get(inboxnats.HeaderEventID),
			body:  m.Data(),
			raw:   m,
		})
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return out, batch.Error()
}

// ack acknowledges each record and waits for the server to confirm it.
func (s *natsSub) ack(ctx context.Context, recs []*record) error {
	for _, r := range recs {
		if err := r.raw.(jetstream.Msg).DoubleAck(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (s *natsSub) close() { s.nc.Close() }
