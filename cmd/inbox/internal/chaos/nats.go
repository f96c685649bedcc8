package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxnats"
	"github.com/txinbox/inbox/internal/testdb"
)

// natsAckWait is the AckWait of a run's JetStream consumer: short, so that
// the messages a killed consumer held come back quickly.
const natsAckWait = 4 * time.Second

// natsTransport is a JetStream server embedded in the coordinator, on a
// loopback port and a store directory of the run. Its broker fault is a
// restart of that server on the same directory: every client loses its
// connection, and the stream and the consumer's acks survive on disk.
type natsTransport struct {
	opts    *server.Options
	url     string
	stream  string
	subject string

	mu  sync.Mutex
	srv *server.Server
	nc  *nats.Conn
	js  jetstream.JetStream
}

func newNATS(ctx context.Context, _ *Config) (*natsTransport, error) {
	dir, err := os.MkdirTemp("", "inbox-chaos-nats-")
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	suffix := testdb.RandomSuffix()
	t := &natsTransport{
		opts: &server.Options{
			Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: dir,
			NoLog: true, NoSigs: true,
		},
		url:     "nats://127.0.0.1:" + strconv.Itoa(port),
		stream:  "INBOX_CHAOS_" + strings.ToUpper(suffix),
		subject: "inbox.chaos." + suffix,
	}
	if err := t.start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	t.nc, err = nats.Connect(t.url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.close()
		return nil, fmt.Errorf("chaos: connect to the embedded NATS server: %w", err)
	}
	t.js, err = jetstream.New(t.nc)
	if err == nil {
		_, err = t.js.CreateStream(ctx, jetstream.StreamConfig{
			Name: t.stream, Subjects: []string{t.subject}, Storage: jetstream.FileStorage,
		})
	}
	if err == nil {
		_, err = t.js.CreateOrUpdateConsumer(ctx, t.stream, jetstream.ConsumerConfig{
			Durable:    "chaos",
			AckPolicy:  jetstream.AckExplicitPolicy,
			AckWait:    natsAckWait,
			MaxDeliver: -1,
		})
	}
	if err != nil {
		t.close()
		return nil, fmt.Errorf("chaos: create the stream and consumer: %w", err)
	}
	return t, nil
}

func (t *natsTransport) start() error {
	srv, err := server.NewServer(t.opts)
	if err != nil {
		return fmt.Errorf("chaos: embedded NATS server: %w", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(30 * time.Second) {
		srv.Shutdown()
		return fmt.Errorf("chaos: the embedded NATS server did not start")
	}
	t.mu.Lock()
	t.srv = srv
	t.mu.Unlock()
	return nil
}

// send publishes e once.
func (t *natsTransport) send(ctx context.Context, e event) error {
	msg := nats.NewMsg(t.subject)
	msg.Data = e.body()
	msg.Header.Set(inboxnats.HeaderEventID, e.ID)
	// Bounded, so that a publish lost in a restart is retried soon.
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := t.js.PublishMsg(ctx, msg)
	return err
}

func (t *natsTransport) consumerArgs() []string {
	return []string{"--transport", "nats", "--endpoint", t.url, "--queue-url", t.stream + "/chaos"}
}

// injectFault restarts the server on the same store directory.
func (t *natsTransport) injectFault(*rand.Rand) bool {
	t.mu.Lock()
	srv := t.srv
	t.srv = nil
	t.mu.Unlock()
	if srv == nil {
		return false
	}
	srv.Shutdown()
	srv.WaitForShutdown()
	// The port was just released; a start that fails is tried again, a
	// bounded number of times, so that the run keeps its broker.
	for range 20 {
		if t.start() == nil {
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false
}

func (t *natsTransport) close() {
	if t.nc != nil {
		t.nc.Close()
	}
	t.mu.Lock()
	srv := t.srv
	t.srv = nil
	t.mu.Unlock()
	if srv != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
	}
	os.RemoveAll(t.opts.StoreDir)
}

// runNATSConsumer runs the inboxnats adapter in a consumer process.
func runNATSConsumer(ctx context.Context, f *consumerFlags, client *inbox.Client[pgx.Tx], h inbox.Handler[pgx.Tx]) error {
	stream, durable, ok := strings.Cut(f.queueURL, "/")
	if !ok {
		return fmt.Errorf("chaos-consumer: --queue-url %q: want STREAM/DURABLE", f.queueURL)
	}
	nc, err := nats.Connect(f.endpoint, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	c, err := inboxnats.New(js, client, h, &inboxnats.Config{
		Stream:    stream,
		Durable:   durable,
		Consumer:  f.consumer,
		Key:       inbox.JSONKey("event_id"),
		Batch:     100,
		FetchWait: time.Second,
		// Chaos makes messages come back often; none of that is the
		// message's fault.
		MaxDeliver:      1000,
		RetryBackoff:    100 * time.Millisecond,
		MaxRetryBackoff: 2 * time.Second,
		ShutdownTimeout: 5 * time.Second,
		Logger:          consumerLogger(),
	})
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

// calm: a server restart is over when injectFault returns; nothing waits.
func (t *natsTransport) calm() {}

// redelivery: a message that a killed consumer held comes back when its
// AckWait runs out, one handed back after a failure when its NakWithDelay
// does (at most the consumers' MaxRetryBackoff), and a consumer fetches it
// within a second.
func (t *natsTransport) redelivery() time.Duration {
	return max(natsAckWait, 2*time.Second) + time.Second
}
