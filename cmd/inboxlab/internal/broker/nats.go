package broker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txinbox/inbox/inboxnats"
	"github.com/txinbox/inbox/outbox"
)

// NATS is a JetStream server embedded in this process, on a loopback port
// and a store directory of its own, or the server at a URL.
type NATS struct {
	url string
	// opts are the embedded server's, nil for a server at a URL; a restart
	// keeps its port and store directory.
	opts *server.Options
	// nc and js are the broker's own connection: it creates the streams
	// and durables, and sends.
	nc *nats.Conn
	js jetstream.JetStream

	mu  sync.Mutex
	srv *server.Server
	// conns are those Connect opened, which Close closes.
	conns []*nats.Conn
	// streams are those created on a server at a URL.
	streams created
}

// OpenNATS starts a JetStream server in this process, or reaches the one
// at url.
func OpenNATS(url string) (*NATS, error) {
	n := &NATS{url: url}
	if url == "" {
		if err := n.embed(); err != nil {
			n.Close()
			return nil, err
		}
	}
	var err error
	if n.nc, n.js, err = ConnectNATS(n.url); err != nil {
		n.Close()
		return nil, fmt.Errorf("cannot reach NATS at %s: %w", n.url, err)
	}
	return n, nil
}

// connectWait bounds how long ConnectNATS tries a server that does not
// answer: one that a test or chaos just restarted may take a while to
// listen on a loaded machine.
const connectWait = 30 * time.Second

// ConnectNATS opens a connection to the NATS server at url, which
// reconnects for as long as it is open, and its JetStream. It tries for up
// to 30 s while no server answers, or the one that answered went down
// before the handshake ended.
func ConnectNATS(url string) (*nats.Conn, jetstream.JetStream, error) {
	deadline := time.Now().Add(connectWait)
	wait := 10 * time.Millisecond
	var nc *nats.Conn
	for {
		var err error
		nc, err = nats.Connect(url, nats.Timeout(5*time.Second), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
		if err == nil {
			break
		}
		// No server listening yet, or one that went down during the
		// handshake (a chaos restart): try again.
		var netErr *net.OpError
		gone := errors.Is(err, nats.ErrNoServers) || errors.As(err, &netErr) || errors.Is(err, io.EOF)
		if !gone || time.Now().After(deadline) {
			return nil, nil, err
		}
		time.Sleep(wait)
		wait = min(wait*2, 500*time.Millisecond)
	}
	// A publish lost in a server restart fails in time, rather than wait
	// for an answer forever.
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(10*time.Second))
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// embed starts the embedded server on a free port and a temporary store.
func (n *NATS) embed() error {
	dir, err := os.MkdirTemp("", "inboxlab-nats-")
	if err != nil {
		return err
	}
	// The port is chosen here, not by the server, so that a restart keeps
	// it and the clients find the server again.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.RemoveAll(dir)
		return err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	n.opts = &server.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true}
	n.url = "nats://127.0.0.1:" + strconv.Itoa(port)
	return n.start()
}

func (n *NATS) start() error {
	srv, err := server.NewServer(n.opts)
	if err != nil {
		return fmt.Errorf("embedded NATS server: %w", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(30 * time.Second) {
		srv.Shutdown()
		return errors.New("the embedded NATS server did not start in 30s")
	}
	n.mu.Lock()
	n.srv = srv
	n.mu.Unlock()
	return nil
}

// Transport is TransportNATS.
func (n *NATS) Transport() string { return TransportNATS }

// Kind says which server it is.
func (n *NATS) Kind() string {
	if n.opts != nil {
		return "in-process NATS JetStream"
	}
	return "NATS JetStream at " + n.url
}

// URL is the server's client URL.
func (n *NATS) URL() string { return n.url }

// Connect opens another connection to the server, which Close closes.
func (n *NATS) Connect() (jetstream.JetStream, error) {
	nc, js, err := ConnectNATS(n.url)
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	n.conns = append(n.conns, nc)
	n.mu.Unlock()
	return js, nil
}

// CreateStream creates the file-backed stream name over subjects.
func (n *NATS) CreateStream(ctx context.Context, name string, subjects ...string) error {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := n.js.CreateStream(cctx, jetstream.StreamConfig{Name: name, Subjects: subjects, Storage: jetstream.FileStorage}); err != nil {
		return fmt.Errorf("create the stream %s on %s: %w", name, n.Kind(), err)
	}
	if n.opts == nil {
		n.streams.add(name)
	}
	return nil
}

// Durable configures a durable pull consumer of a stream.
type Durable struct {
	Name string
	// FilterSubject is the subject it takes; empty takes the stream's.
	FilterSubject string
	// AckWait is how long a message it handed out and that was not acked
	// waits before it is delivered again. Zero is the server's default.
	AckWait time.Duration
	// MaxAckPending bounds the messages handed out and not acked. Zero is
	// the server's default.
	MaxAckPending int
}

// CreateDurable creates, or updates, the durable pull consumer d of
// stream, which acknowledges explicitly and delivers a message as often
// as it comes back.
func (n *NATS) CreateDurable(ctx context.Context, stream string, d Durable) error {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err := n.js.CreateOrUpdateConsumer(cctx, stream, jetstream.ConsumerConfig{
		Durable:       d.Name,
		FilterSubject: d.FilterSubject,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       d.AckWait,
		MaxAckPending: d.MaxAckPending,
		MaxDeliver:    -1,
	})
	if err != nil {
		return fmt.Errorf("create the JetStream consumer %s of %s: %w", d.Name, stream, err)
	}
	return nil
}

// Send publishes msgs to subject, all at once, and waits until the stream
// has acknowledged each.
func (n *NATS) Send(ctx context.Context, subject string, msgs ...Message) error {
	futures := make([]jetstream.PubAckFuture, len(msgs))
	for i, m := range msgs {
		msg := nats.NewMsg(subject)
		// A publish retried after Send returned must not see the caller's
		// buffer, which it may reuse.
		msg.Data = slices.Clone(m.Body)
		msg.Header.Set(HeaderEventID, m.ID)
		for k, v := range m.Headers {
			msg.Header.Set(k, v)
		}
		f, err := n.js.PublishMsgAsync(msg)
		if err != nil {
			return err
		}
		futures[i] = f
	}
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Subscribe starts a consumer of the durable of stream, on a connection of
// its own.
func (n *NATS) Subscribe(ctx context.Context, stream, durable string, c *PollConfig) (Poller, error) {
	nc, js, err := ConnectNATS(n.url)
	if err != nil {
		return nil, err
	}
	cons, err := js.Consumer(ctx, stream, durable)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("JetStream consumer %s of %s: %w", durable, stream, err)
	}
	return &natsPoller{nc: nc, cons: cons, c: c.withDefaults()}, nil
}

// Restart restarts the embedded server on the same port and store
// directory: every client loses its connection, and the streams and the
// durables' acknowledgements survive on disk. It reports false, and does
// nothing, on a server at a URL.
func (n *NATS) Restart() bool {
	n.mu.Lock()
	srv := n.srv
	n.srv = nil
	n.mu.Unlock()
	if srv == nil {
		return false
	}
	srv.Shutdown()
	srv.WaitForShutdown()
	// The port was just released; a start that fails is tried again, a
	// bounded number of times, so that the run keeps its broker.
	for range 20 {
		if n.start() == nil {
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false
}

// NewTopic creates a stream of its own for the subject name, and a
// durable per subscription.
func (n *NATS) NewTopic(ctx context.Context, name string, c *TopicConfig) (Topic, error) {
	if c == nil {
		c = &TopicConfig{}
	}
	t := &natsTopic{n: n, stream: strings.ToUpper(strings.NewReplacer(".", "_", "-", "_").Replace(name)), subject: name}
	if err := n.CreateStream(ctx, t.stream, t.subject); err != nil {
		return nil, err
	}
	for _, sub := range c.Subscriptions {
		if err := n.CreateDurable(ctx, t.stream, Durable{Name: sub, AckWait: c.Redelivery, MaxAckPending: c.MaxPending}); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// Close deletes the streams created on a server at a URL, or stops the
// embedded server and deletes its store.
func (n *NATS) Close() { n.Cleanup() }

// Cleanup is Close, and says what it deleted and stopped.
func (n *NATS) Cleanup() []string {
	var said []string
	kind := n.Kind()
	if n.nc != nil {
		for _, s := range n.streams.take() {
			dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := n.js.DeleteStream(dctx, s)
			cancel()
			if n.opts == nil {
				said = append(said, deleted("stream", s, err))
			}
		}
		n.nc.Close()
	}
	n.mu.Lock()
	conns, srv := n.conns, n.srv
	n.conns, n.srv = nil, nil
	n.mu.Unlock()
	for _, nc := range conns {
		nc.Close()
	}
	if srv != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
	}
	if n.opts != nil {
		if err := os.RemoveAll(n.opts.StoreDir); err != nil {
			said = append(said, fmt.Sprintf("stopped the %s, could not remove its store %s (%v)", kind, n.opts.StoreDir, err))
		} else {
			said = append(said, fmt.Sprintf("stopped the %s and removed its store %s", kind, n.opts.StoreDir))
		}
	}
	return said
}

// natsTopic is a stream with one subject, whose subscriptions are
// durables.
type natsTopic struct {
	n               *NATS
	stream, subject string
}

func (t *natsTopic) Name() string { return t.subject }

func (t *natsTopic) Send(ctx context.Context, msgs ...Message) error {
	return t.n.Send(ctx, t.subject, msgs...)
}

func (t *natsTopic) Subscribe(ctx context.Context, sub string, c *PollConfig) (Poller, error) {
	return t.n.Subscribe(ctx, t.stream, sub, c)
}

func (t *natsTopic) Address(sub string) Address {
	return Address{Transport: TransportNATS, NATSURL: t.n.url, Stream: t.stream, Durable: sub}
}

func (t *natsTopic) Stored(ctx context.Context) (int, error) {
	s, err := t.n.js.Stream(ctx, t.stream)
	if err != nil {
		return 0, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, err
	}
	return int(info.State.Msgs), nil
}

func (t *natsTopic) OutboxSink() (outbox.Sink, error) { return inboxnats.NewOutboxSink(t.n.js), nil }

// natsPoller fetches from a durable, as inboxnats does.
type natsPoller struct {
	nc   *nats.Conn
	cons jetstream.Consumer
	c    PollConfig
}

func (p *natsPoller) Poll(ctx context.Context) ([]*Delivery, error) {
	fctx, cancel := context.WithTimeout(ctx, p.c.Wait)
	defer cancel()
	deadline, _ := fctx.Deadline()
	batch, err := p.cons.Fetch(p.c.Batch, jetstream.FetchContext(fctx))
	if err != nil {
		// The client checks the deadline itself, and may find it passed
		// before fctx's timer has fired and set fctx.Err().
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case fctx.Err() != nil || !time.Now().Before(deadline):
			// The fetch's time ran out before it was sent (the process
			// was not scheduled): nothing was asked for.
			return nil, nil
		}
		return nil, err
	}
	var out []*Delivery
	for m := range batch.Messages() {
		out = append(out, &Delivery{ID: m.Headers().Get(HeaderEventID), Body: m.Data(), raw: m})
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := batch.Error(); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return nil, err
	}
	return out, nil
}

func (p *natsPoller) Ack(ctx context.Context, ds []*Delivery) error {
	for _, d := range ds {
		m := d.raw.(jetstream.Msg)
		var err error
		if p.c.ConfirmAcks {
			err = m.DoubleAck(ctx)
		} else {
			err = m.Ack()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Close closes the poller's connection: what it held and did not ack
// comes back when the durable's AckWait runs out.
func (p *natsPoller) Close() { p.nc.Close() }
