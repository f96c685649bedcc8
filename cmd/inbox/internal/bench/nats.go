package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxnats"
)

// natsFetchWait is how long a fetch of the NATS rows waits for its batch
// to fill. A fetch returns as soon as it has brokerBatch messages; it
// waits this long only when an operation's messages were split across two
// fetches, and each idle consumer asks again this often. The client gives
// the server 90% of it, and a message the server delivers to a pull
// request the client gave up on comes back only after AckWait: so not much
// shorter.
const natsFetchWait = 100 * time.Millisecond

// natsAckWait is the AckWait of the rows' JetStream consumers: short, so
// that a message lost in a pull request the client gave up on costs an
// operation seconds, not the run.
const natsAckWait = 2 * time.Second

// natsStore is the NATS side of the nats-inbox-batch-100 and nats-bare-ack
// rows: a JetStream server embedded in this process (on a loopback port,
// with its store in a temporary directory, so that the rows need no set-up
// and measure the adapter rather than a network), one stream, and per
// worker a subject and a pull consumer for each row, as a stream
// partitioned by account key is consumed.
type natsStore struct {
	srv *server.Server
	// producer publishes; the inbox consumers and the bare loops each
	// have a connection of their own.
	producer, inboxJS, bareJS jetstream.JetStream
	inbox                     natsLane
	bare                      natsLane
}

// natsLane is one row's subjects, one per worker, and its tracker.
type natsLane struct {
	subjects []string
	t        *tracker
}

const natsStream = "BENCH"

var natsResource = &resource{
	name:       "nats",
	background: true,
	open: func(ctx context.Context, b *bench) (func(), error) {
		n := &natsStore{inbox: natsLane{t: newTracker()}, bare: natsLane{t: newTracker()}}
		var closers []func()
		closeAll := func() {
			for i := len(closers) - 1; i >= 0; i-- {
				closers[i]()
			}
		}
		if err := n.start(ctx, b, &closers); err != nil {
			closeAll()
			return nil, err
		}
		runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
		var running sync.WaitGroup
		closers = append(closers, func() { stop(); running.Wait() })
		if err := n.startInbox(ctx, runCtx, b, &running); err != nil {
			closeAll()
			return nil, err
		}
		if err := n.startBare(ctx, runCtx, &running); err != nil {
			closeAll()
			return nil, err
		}
		b.nats = n
		return closeAll, nil
	},
}

// start starts the server, connects the producer and creates the stream.
func (n *natsStore) start(ctx context.Context, b *bench, closers *[]func()) error {
	dir, err := os.MkdirTemp("", "inbox-bench-nats-")
	if err != nil {
		return err
	}
	*closers = append(*closers, func() { os.RemoveAll(dir) })
	n.srv, err = server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: dir,
		NoLog: true, NoSigs: true,
	})
	if err != nil {
		return fmt.Errorf("embedded NATS server: %w", err)
	}
	go n.srv.Start()
	*closers = append(*closers, func() { n.srv.Shutdown(); n.srv.WaitForShutdown() })
	if !n.srv.ReadyForConnections(30 * time.Second) {
		return errors.New("the embedded NATS server did not start in 30s")
	}
	for _, js := range []*jetstream.JetStream{&n.producer, &n.inboxJS, &n.bareJS} {
		if *js, err = n.connect(closers); err != nil {
			return err
		}
	}
	for i := range b.maxW {
		n.inbox.subjects = append(n.inbox.subjects, "bench.inbox."+strconv.Itoa(i))
		n.bare.subjects = append(n.bare.subjects, "bench.bare."+strconv.Itoa(i))
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err = n.producer.CreateStream(cctx, jetstream.StreamConfig{
		Name: natsStream, Subjects: []string{"bench.>"}, Storage: jetstream.FileStorage,
	})
	if err != nil {
		return fmt.Errorf("create the stream: %w", err)
	}
	return nil
}

// connect opens a connection to the embedded server.
func (n *natsStore) connect(closers *[]func()) (jetstream.JetStream, error) {
	nc, err := nats.Connect(n.srv.ClientURL())
	if err != nil {
		return nil, fmt.Errorf("connect to the embedded NATS server: %w", err)
	}
	*closers = append(*closers, nc.Close)
	return jetstream.New(nc)
}

// consumer creates the pull consumer of one subject.
func (n *natsStore) consumer(ctx context.Context, js jetstream.JetStream, subject string) (jetstream.Consumer, string, error) {
	durable := subjectName(subject)
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := js.CreateOrUpdateConsumer(cctx, natsStream, jetstream.ConsumerConfig{
		Durable:       durable,
		FilterSubject: subject,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       natsAckWait,
		MaxDeliver:    -1,
		MaxAckPending: 2 * brokerBatch,
	})
	if err != nil {
		return nil, "", fmt.Errorf("create the consumer of %s: %w", subject, err)
	}
	return c, durable, nil
}

// subjectName turns a subject into a consumer name: dots are not allowed.
func subjectName(subject string) string {
	out := []byte(subject)
	for i, c := range out {
		if c == '.' {
			out[i] = '-'
		}
	}
	return string(out)
}

// startInbox runs an inboxnats consumer per subject of the inbox row, at
// batch 100, over the Postgres inbox with the batch rows' handler.
func (n *natsStore) startInbox(ctx, runCtx context.Context, b *bench, running *sync.WaitGroup) error {
	js := n.inboxJS
	client, err := observedClient(b, n.inbox.t)
	if err != nil {
		return err
	}
	for _, subject := range n.inbox.subjects {
		_, durable, err := n.consumer(ctx, js, subject)
		if err != nil {
			return err
		}
		c, err := inboxnats.New[pgx.Tx](js, client, b.pg.batchHandler, &inboxnats.Config{
			Stream:          natsStream,
			Durable:         durable,
			Consumer:        "bench-nats",
			Key:             inbox.HeaderKey(inboxnats.HeaderEventID),
			Workers:         1,
			Batch:           brokerBatch,
			FetchWait:       natsFetchWait,
			ShutdownTimeout: 5 * time.Second,
		})
		if err != nil {
			return err
		}
		running.Go(func() {
			if err := c.Run(runCtx); err != nil {
				n.inbox.t.fail(fmt.Errorf("inboxnats consumer of %s: %w", subject, err))
			}
		})
	}
	return nil
}

// startBare runs a bare ack loop per subject of the bare row.
func (n *natsStore) startBare(ctx, runCtx context.Context, running *sync.WaitGroup) error {
	js := n.bareJS
	for _, subject := range n.bare.subjects {
		c, _, err := n.consumer(ctx, js, subject)
		if err != nil {
			return err
		}
		running.Go(func() {
			if err := natsBareLoop(runCtx, c, n.bare.t); err != nil {
				n.bare.t.fail(fmt.Errorf("bare ack loop of %s: %w", subject, err))
			}
		})
	}
	return nil
}

// natsBareLoop is what a consumer without an inbox does, fetched the way
// inboxnats fetches: fetch up to brokerBatch messages, take them, and
// acknowledge each, until ctx is done.
func natsBareLoop(ctx context.Context, c jetstream.Consumer, t *tracker) error {
	var msgs []jetstream.Msg
	for ctx.Err() == nil {
		fctx, cancel := context.WithTimeout(ctx, natsFetchWait)
		deadline, _ := fctx.Deadline()
		batch, err := c.Fetch(brokerBatch, jetstream.FetchContext(fctx))
		if err != nil {
			// The client checks the deadline itself, and may find it
			// passed before fctx's timer has fired and set fctx.Err().
			expired := fctx.Err() != nil || !time.Now().Before(deadline)
			cancel()
			switch {
			case ctx.Err() != nil:
				return nil
			case expired:
				// The fetch's time ran out before it was sent (the
				// process was not scheduled): nothing was asked for.
				continue
			}
			return err
		}
		msgs = msgs[:0]
		for m := range batch.Messages() {
			msgs = append(msgs, m)
		}
		cancel()
		if err := batch.Error(); err != nil && !errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			return err
		}
		for _, m := range msgs {
			t.done(m.Headers().Get(inboxnats.HeaderEventID))
		}
		for _, m := range msgs {
			if err := m.Ack(); err != nil && ctx.Err() == nil {
				return err
			}
		}
	}
	return nil
}

// natsInboxBatch publishes the row's batch to the worker's subject and
// waits until the inboxnats consumer has committed it.
func natsInboxBatch(ctx context.Context, b *bench, w *worker) error {
	return b.nats.roundTrip(ctx, b, w, &b.nats.inbox)
}

// natsBareAck publishes the row's batch to the worker's subject and waits
// until the bare loop has taken it.
func natsBareAck(ctx context.Context, b *bench, w *worker) error {
	return b.nats.roundTrip(ctx, b, w, &b.nats.bare)
}

// roundTrip publishes a batch of messages to the worker's subject of lane,
// each with its id in the event-id header, waits for the server's
// acknowledgements, and waits until lane's consumer is done with them.
func (n *natsStore) roundTrip(ctx context.Context, b *bench, w *worker, lane *natsLane) error {
	es := w.next(b, w.batch)
	subject := lane.subjects[w.index%b.maxW]
	return lane.t.roundTrip(ctx, es, func(ctx context.Context) error {
		futures := make([]jetstream.PubAckFuture, len(es))
		for i, e := range es {
			msg := &nats.Msg{
				Subject: subject,
				// The worker reuses its payload buffer; a retried publish
				// must not see the next message's.
				Data:   append([]byte(nil), e.msg.Payload...),
				Header: nats.Header{inboxnats.HeaderEventID: []string{e.msg.ID}},
			}
			f, err := n.producer.PublishMsgAsync(msg)
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
	})
}
