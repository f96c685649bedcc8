package bench

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/cmd/inboxlab/internal/broker"
	"github.com/txinbox/inbox/inboxnats"
	"github.com/txinbox/inbox/inboxtransport"
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
// rows: by default a JetStream server embedded in this process (on a
// loopback port, with its store in a temporary directory, so that the rows
// need no set-up and measure the adapter rather than a network), or the
// server at Config.NATSURL; one file-backed stream, named after the run's
// schema and deleted at the end, and per worker a subject and a pull
// consumer for each row, as a stream partitioned by account key is
// consumed. Both rows always share the server and the stream. The inbox
// consumers share a connection; each bare loop has one of its own.
//
// The embedded server is the default, not the machine's: on the same
// cores it costs the same CPU per message either way (outside the process
// it only leaves the "client CPU" column), and a shared server carries
// other work's messages.
type natsStore struct {
	n      *broker.NATS
	stream string
	inbox  lane
	bare   lane
}

var natsResource = &resource{
	name:       "nats",
	background: true,
	open: func(ctx context.Context, b *bench) (func(), error) {
		// Named after the run's schema, so that runs sharing a server
		// do not meet.
		s := &natsStore{stream: strings.ToUpper(b.schema), inbox: newLane(b, b.schema+".inbox."), bare: newLane(b, b.schema+".bare.")}
		return openWith(func(c *cleanup) error { return s.open(ctx, b, c) })
	},
}

// open starts the server, creates the stream and the durables, and starts
// the consumers.
func (s *natsStore) open(ctx context.Context, b *bench, c *cleanup) error {
	var err error
	if s.n, err = broker.OpenNATS(b.cfg.NATSURL); err != nil {
		if b.cfg.NATSURL != "" {
			return &unavailableError{err}
		}
		return err
	}
	c.add(s.n.Close)
	if err := s.n.CreateStream(ctx, s.stream, b.schema+".>"); err != nil {
		return err
	}
	for _, subject := range append(append([]string(nil), s.inbox.names...), s.bare.names...) {
		err := s.n.CreateDurable(ctx, s.stream, broker.Durable{
			// MaxAckPending: the batch in flight, the one fetched ahead
			// and the acks of the one before on their way, with room
			// (inboxnats.Config's doc).
			Name: durableName(subject), FilterSubject: subject, AckWait: natsAckWait, MaxAckPending: 4 * brokerBatch,
		})
		if err != nil {
			return err
		}
	}
	js, err := s.n.Connect()
	if err != nil {
		return err
	}
	// An inboxnats consumer per subject of the inbox row, at batch 100,
	// over the Postgres inbox with the batch rows' handler, and a bare ack
	// loop per subject of the bare row, fetching the way inboxnats
	// fetches.
	if err := startLanes(ctx, b, c, &s.inbox, &s.bare, func(client *inbox.Client[pgx.Tx], subject string) (runner, error) {
		return inboxnats.New[pgx.Tx](js, client, b.pg.batchHandler, &inboxnats.Config{
			Stream: s.stream, Durable: durableName(subject), Consumer: "bench-nats", Key: broker.EventIDKey,
			FetchWait: natsFetchWait, Settings: inboxtransport.Settings{Workers: 1, MaxBatch: brokerBatch, ShutdownTimeout: 5 * time.Second},
		})
	}, func(subject string) (broker.Poller, error) {
		return s.n.Subscribe(ctx, s.stream, durableName(subject), &broker.PollConfig{Batch: brokerBatch, Wait: natsFetchWait})
	}); err != nil {
		return err
	}
	b.nats = s
	return nil
}

// durableName turns a subject into a consumer name: dots are not allowed.
func durableName(subject string) string { return strings.ReplaceAll(subject, ".", "-") }

// natsInboxBatch publishes the row's batch to the worker's subject and
// waits until the inboxnats consumer has committed it.
func natsInboxBatch(ctx context.Context, b *bench, w *worker) error {
	return laneTrip(ctx, b, w, b.nats, &b.nats.inbox)
}

// natsBareAck publishes the row's batch to the worker's subject and waits
// until the bare loop has taken it.
func natsBareAck(ctx context.Context, b *bench, w *worker) error {
	return laneTrip(ctx, b, w, b.nats, &b.nats.bare)
}

// send publishes msgs to subject and waits for the server's
// acknowledgements.
func (s *natsStore) send(ctx context.Context, _ int, subject string, msgs []broker.Message) error {
	return s.n.Send(ctx, subject, msgs...)
}
