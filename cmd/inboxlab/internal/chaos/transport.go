package chaos

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/txinbox/inbox/cmd/inboxlab/internal/broker"
	"github.com/txinbox/inbox/internal/testdb"
)

// The timings of a run.
//
// Kafka: a short session, so that the partitions of a consumer killed
// without leaving the group move to the others quickly, and a short
// rebalance timeout: the classic group protocol waits that long for a
// member that died during a rebalance, and with kgo's default (60s) a run
// with a kill every few seconds spends most of its time waiting for dead
// members. A revoke takes at most twice the drain timeout, which must stay
// under it.
//
// NATS and SQS: a short AckWait and visibility timeout, so that the
// messages a killed consumer held come back quickly; on SQS a backoff
// after a failure that grows no longer than it. (The adapter doubles the
// backoff with each receive of a message; on real SQS, where chaos
// receives a message many times, the default cap of 5 minutes would hide
// one past any drain.)
const (
	kafkaPartitions       = 6
	kafkaSession          = 1500 * time.Millisecond
	kafkaHeartbeat        = 150 * time.Millisecond
	kafkaRebalanceTimeout = 5 * time.Second
	kafkaShutdownTimeout  = 2 * time.Second

	natsAckWait = 4 * time.Second

	sqsVisibility      = 4 * time.Second
	sqsWait            = time.Second
	sqsRetryBackoff    = time.Second
	sqsMaxRetryBackoff = sqsVisibility

	// retryBackoff and maxRetryBackoff are the backoff of a message handed
	// back after a failure on NATS and RabbitMQ.
	retryBackoff    = 100 * time.Millisecond
	maxRetryBackoff = 2 * time.Second

	// sendTimeout bounds one send, so that a send lost in a broker fault
	// (a NATS restart) is retried soon.
	sendTimeout = 2 * time.Second
)

// kafkaTimings are the consumers' timings on Kafka.
var kafkaTimings = broker.KafkaTimings{Session: kafkaSession, Heartbeat: kafkaHeartbeat, Rebalance: kafkaRebalanceTimeout, FetchWait: 100 * time.Millisecond}

// subscription is what every consumer process of a run reads: one Kafka
// group, one NATS durable, one RabbitMQ queue, the SQS queue.
const subscription = "chaos"

// rabbitURL is the broker of a RabbitMQ run: INBOX_CHAOS_AMQP_URL, or the
// machine's server.
func rabbitURL() string {
	if u := os.Getenv("INBOX_CHAOS_AMQP_URL"); u != "" {
		return u
	}
	return broker.DefaultAMQPURL
}

// transport is the broker of a run, as the coordinator sees it: kfake in
// this process or a real cluster, whose faults are offset commits that
// fail; goaws in this process or a real SQS endpoint, whose faults are
// requests that fail; a NATS server embedded in the coordinator, whose
// fault is a restart on the same store directory; a RabbitMQ server, which
// the consumers reach through a proxy in the coordinator, whose fault
// closes every consumer connection at once, from outside the consumers, as
// a broker restart or a network failure would (the management API, which
// could close them from the server, is often not enabled).
type transport struct {
	b broker.Broker
	t broker.Topic
}

func newTransport(ctx context.Context, cfg *Config) (*transport, error) {
	b, err := broker.Open(&broker.Config{
		Transport: cfg.Transport, Brokers: cfg.Brokers, SQSEndpoint: cfg.SQSEndpoint, AMQPURL: rabbitURL(),
		Kafka: kafkaTimings, ProxyConsumers: true,
	})
	if err != nil {
		return nil, err
	}
	redelivery := natsAckWait
	if cfg.Transport == broker.TransportSQS {
		redelivery = sqsVisibility
	}
	t, err := b.NewTopic(ctx, "inbox-chaos-"+testdb.RandomSuffix(), &broker.TopicConfig{
		Partitions: kafkaPartitions, Subscriptions: []string{subscription}, Redelivery: redelivery,
	})
	if err != nil {
		b.Close()
		return nil, err
	}
	return &transport{b: b, t: t}, nil
}

// send sends e once, keyed by its account so that an account's events stay
// in order on Kafka.
func (tr *transport) send(ctx context.Context, e event) error {
	ctx, cancel := context.WithTimeout(ctx, sendTimeout)
	defer cancel()
	return tr.t.Send(ctx, broker.Message{ID: e.ID, Key: fmt.Sprint(e.Account), Body: e.body()})
}

// consumerArgs tell a consumer process where the broker is.
func (tr *transport) consumerArgs() []string { return tr.t.Address(subscription).Args() }

// injectFault makes the broker fail, where it can, and reports whether it
// did: an offset commit of the run's group answered with an error a real
// broker gives during rebalances, the next few deletes or receives of SQS
// failed as a flaky network would fail them, the NATS server restarted,
// every RabbitMQ consumer connection closed.
func (tr *transport) injectFault(r *rand.Rand) bool {
	switch b := tr.b.(type) {
	case *broker.Kafka:
		codes := []int16{kerr.RebalanceInProgress.Code, kerr.IllegalGeneration.Code, kerr.UnknownMemberID.Code, kerr.CoordinatorLoadInProgress.Code}
		return b.FailCommit(tr.t.Address(subscription).Group, codes[r.IntN(len(codes))])
	case *broker.SQS:
		action := "DeleteMessageBatch"
		if r.IntN(2) == 0 {
			action = "ReceiveMessage"
		}
		return b.FailNext(action, 1+r.IntN(3))
	case *broker.NATS:
		return b.Restart()
	case *broker.Rabbit:
		return b.CutConsumers()
	}
	return false
}

// calm drops the faults injected and not yet hit, before the drain: a NATS
// restart and a cut connection are over when injectFault returns.
func (tr *transport) calm() {
	if b, ok := tr.b.(interface{ Calm() }); ok {
		b.Calm()
	}
}

func (tr *transport) close() []string { return tr.b.Cleanup() }

// redelivery bounds how long a message can stay out of every consumer's
// reach on the transport once the faults stop: held by a consumer that was
// killed, or handed back with a backoff.
func redelivery(transport string) time.Duration {
	switch transport {
	case broker.TransportKafka:
		// The partitions of a member that was killed move to the others
		// once its session times out and the rebalance completes.
		return kafkaSession + kafkaRebalanceTimeout
	case broker.TransportSQS:
		// A message that a killed consumer held comes back when its
		// visibility timeout expires, one handed back after a failure
		// when its backoff does, and a consumer receives it within one
		// long poll.
		return max(sqsVisibility, sqsMaxRetryBackoff) + sqsWait
	case broker.TransportNATS:
		// A message that a killed consumer held comes back when its
		// AckWait runs out, one handed back after a failure when its
		// NakWithDelay does, and a consumer fetches it within a second.
		return max(natsAckWait, maxRetryBackoff) + time.Second
	default:
		// RabbitMQ requeues what a killed consumer held as soon as its
		// connection closes; a message held back after a failure waits at
		// most maxRetryBackoff, and a consumer whose connection was cut
		// dials again within a second.
		return maxRetryBackoff + time.Second
	}
}

// send is one produce of an event at an offset from the start.
type send struct {
	e  event
	at time.Duration
}

// schedule spreads the events over about d, in order, and places the
// second copy of each event marked Twice at a random later time.
func schedule(events []event, d time.Duration, seed uint64) []send {
	r := rand.New(rand.NewPCG(seed, seed>>1))
	gap := d / time.Duration(max(len(events), 1))
	out := make([]send, 0, len(events)+len(events)/10)
	for i, e := range events {
		at := time.Duration(i) * gap
		out = append(out, send{e: e, at: at})
		if e.Twice {
			out = append(out, send{e: e, at: at + time.Duration(r.Int64N(int64(d-at)+1))})
		}
	}
	slices.SortStableFunc(out, func(a, b send) int { return cmp.Compare(a.at, b.at) })
	return out
}

// produce sends every event through tr, and a second copy of those marked
// Twice later, spread over about d.
func produce(ctx context.Context, tr *transport, events []event, d time.Duration, seed uint64) error {
	start := time.Now()
	for _, s := range schedule(events, d, seed) {
		if wait := time.Until(start.Add(s.at)); wait > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(wait):
			}
		}
		if err := retrySend(ctx, func() error { return tr.send(ctx, s.e) }); err != nil {
			return err
		}
	}
	return nil
}

// retrySend retries a send that failed, as a producer's relay does: the
// event id stays the same, so a send that did go through becomes a
// duplicate, which is what the inbox is for.
func retrySend(ctx context.Context, send func() error) error {
	var err error
	for range 50 {
		if err = send(); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return err
}
