package bench

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox/cmd/inboxlab/internal/broker"
	"github.com/txinbox/inbox/cmd/inboxlab/internal/broker/brokertest"
	"github.com/txinbox/inbox/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// small is a run of only rows, short and with nothing else.
func small(t *testing.T, rows ...string) Config {
	cfg := Quick()
	cfg.DatabaseURL = testdb.URL(t)
	cfg.RedisAddr = ""
	cfg.Rows = rows
	cfg.Workers = []int{1, 2}
	cfg.Warmup = 0
	cfg.Duration = 100 * time.Millisecond
	cfg.Rounds = 1
	cfg.PurgeRows = 0
	cfg.IDRows = 0
	return cfg
}

// The broker rows run end to end on kfake, an embedded NATS server and
// the machine's RabbitMQ, each inbox row beside its bare ack loop, report
// the ratio of the two and the adapter's target, and leave no queue
// behind.
func TestBrokerRows(t *testing.T) {
	t.Parallel()
	brokertest.RequireServer(t, "RabbitMQ", DefaultAMQPURL)
	rows := []string{"inbox-batch-100", "kafka-bare-ack", "kafka-inbox-batch-100", "nats-bare-ack", "nats-inbox-batch-100", "rabbitmq-bare-ack", "rabbitmq-inbox-batch-100"}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := Run(ctx, small(t, rows...))
	require.NoError(t, err)
	require.Empty(t, rep.Skipped)
	require.Len(t, rep.Results, 2*len(rows))
	for i, res := range rep.Results {
		require.Equal(t, rows[i/2], res.Name)
		require.Equal(t, []int{1, 2}[i%2], res.Workers)
		require.Equal(t, 100, res.Batch, "%s", res.Name)
		require.Positive(t, res.Ops, "%s at %d workers", res.Name, res.Workers)
		require.Equal(t, res.Ops*100, res.Msgs)
		require.Positive(t, res.MsgsPerS, "%s at %d workers", res.Name, res.Workers)
		require.GreaterOrEqual(t, res.P99Ms, res.P50Ms)
		if strings.Contains(res.Name, "inbox-") {
			// Its messages went through the Postgres inbox.
			require.NotNil(t, res.WALBytesPerMsg, "%s", res.Name)
			require.Positive(t, *res.WALBytesPerMsg, "%s", res.Name)
			require.NotNil(t, res.InboxBytesPerRow, "%s", res.Name)
		} else {
			require.Nil(t, res.WALBytesPerMsg, "%s touches no database", res.Name)
		}
		if res.Name != "inbox-batch-100" && strings.HasSuffix(res.Name, "-inbox-batch-100") {
			// The consumer's transactions were timed.
			require.NotNil(t, res.TxUsPerMsg, "%s", res.Name)
			require.Positive(t, *res.TxUsPerMsg, "%s", res.Name)
			require.NotNil(t, res.TxMsgsPerTx, "%s", res.Name)
			require.InDelta(t, 50.5, *res.TxMsgsPerTx, 49.5, "%s: between 1 and the batch", res.Name)
		} else {
			require.Nil(t, res.TxUsPerMsg, "%s has no consumer of its own", res.Name)
		}
	}
	var ratios, targets []string
	cores := strconv.Itoa(rep.Machine.CPUs)
	for _, r := range rep.Targets {
		if strings.Contains(r.Name, "CPU per msg") {
			// The CPU lines: in a run this short, the bare loop's CPU
			// per message can be a few hundredths of the inbox row's,
			// and the ratio, or a share of the cores, round to 0.
			require.GreaterOrEqual(t, r.Value, 0.0, "%s", r.Name)
		} else {
			require.Positive(t, r.Value, "%s", r.Name)
		}
		if r.ReportOnly {
			ratios = append(ratios, r.Name)
			require.True(t, r.Met)
		} else if strings.Contains(r.Name, "min(") {
			targets = append(targets, r.Name)
		}
	}
	require.Equal(t, []string{
		"nats-inbox-batch-100 ÷ nats-bare-ack, msgs/s at 1 worker (report only)",
		"rabbitmq-inbox-batch-100 ÷ rabbitmq-bare-ack, msgs/s at 1 worker (report only)",
		// Where the cores' time went, for the brokers in this process.
		"kafka-bare-ack ÷ kafka-inbox-batch-100, client+server CPU per msg at 1 worker (report only: kafka-inbox-batch-100 ÷ kafka-bare-ack if both kept the cores equally busy)",
		"kafka-inbox-batch-100, share of the " + cores + " cores busy with it (msgs/s × client+server CPU per msg ÷ cores) at 1 worker (report only)",
		"kafka-bare-ack, share of the " + cores + " cores busy with it (msgs/s × client+server CPU per msg ÷ cores) at 1 worker (report only)",
		"nats-bare-ack ÷ nats-inbox-batch-100, client+server CPU per msg at 1 worker (report only: nats-inbox-batch-100 ÷ nats-bare-ack if both kept the cores equally busy)",
		"nats-inbox-batch-100, share of the " + cores + " cores busy with it (msgs/s × client+server CPU per msg ÷ cores) at 1 worker (report only)",
		"nats-bare-ack, share of the " + cores + " cores busy with it (msgs/s × client+server CPU per msg ÷ cores) at 1 worker (report only)",
	}, ratios)
	require.Equal(t, []string{
		"kafka-inbox-batch-100 ÷ min(kafka-bare-ack, inbox-batch-100), msgs/s at 1 worker (≥ 0.8)",
		"nats-inbox-batch-100 ÷ min(nats-bare-ack, inbox-batch-100), msgs/s at 1 worker (≥ 0.8)",
		"rabbitmq-inbox-batch-100 ÷ min(rabbitmq-bare-ack, inbox-batch-100), msgs/s at 1 worker (≥ 0.8)",
	}, targets)

	// The run's queues are gone.
	conn, err := amqp.Dial(DefaultAMQPURL)
	require.NoError(t, err)
	defer conn.Close()
	for _, lane := range []string{"inbox", "bare"} {
		for _, w := range []string{"0", "1"} {
			ch, err := conn.Channel()
			require.NoError(t, err)
			q := rep.Settings.Schema + "." + lane + "." + w
			_, err = ch.QueueDeclarePassive(q, true, false, false, false, nil)
			var ae *amqp.Error
			require.True(t, errors.As(err, &ae) && ae.Code == amqp.NotFound, "queue %s was not deleted: %v", q, err)
		}
	}
}

// A RabbitMQ that does not answer leaves its rows out, says why without
// the password, and the rest of the run goes on.
func TestRabbitMQUnreachable(t *testing.T) {
	t.Parallel()
	cfg := small(t, "bare", "rabbitmq-bare-ack", "rabbitmq-inbox-batch-100")
	cfg.Workers = []int{1}
	cfg.AMQPURL = "amqp://guest:hunter2@127.0.0.1:1/"
	rep, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	require.Len(t, rep.Results, 1)
	require.Equal(t, "bare", rep.Results[0].Name)
	require.Len(t, rep.Skipped, 2)
	for i, name := range []string{"rabbitmq-bare-ack", "rabbitmq-inbox-batch-100"} {
		require.Equal(t, name, rep.Skipped[i].Row)
		require.Contains(t, rep.Skipped[i].Reason, "cannot reach RabbitMQ at amqp://guest:xxxxx@127.0.0.1:1/")
		require.NotContains(t, rep.Skipped[i].Reason, "hunter2")
	}
	require.Equal(t, []string{"bare"}, rep.Settings.Rows)
	var md strings.Builder
	require.NoError(t, rep.WriteMarkdown(&md))
	require.Contains(t, md.String(), "`rabbitmq-bare-ack` was left out: cannot reach RabbitMQ")
}

// A malformed AMQP URL is a usage mistake, found before anything runs.
func TestAMQPURLMalformed(t *testing.T) {
	t.Parallel()
	cfg := Quick()
	cfg.DatabaseURL = "postgres://nobody@127.0.0.1:1/none"
	cfg.AMQPURL = "http://127.0.0.1:5672/"
	_, err := Run(context.Background(), cfg)
	var ce *ConfigError
	require.ErrorAs(t, err, &ce)
	require.Contains(t, err.Error(), "Config.AMQPURL")
}

// With a NATS URL the nats rows run on that server, in a stream named
// after the run's schema, which is deleted at the end.
func TestNATSRowsAtURL(t *testing.T) {
	t.Parallel()
	url := testdb.NATSURL()
	brokertest.RequireServer(t, "NATS", url)
	cfg := small(t, "nats-bare-ack", "nats-inbox-batch-100")
	cfg.Workers = []int{1}
	cfg.NATSURL = url
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg)
	require.NoError(t, err)
	require.Empty(t, rep.Skipped)
	require.Len(t, rep.Results, 2)
	for _, res := range rep.Results {
		require.Positive(t, res.Msgs, "%s", res.Name)
	}

	nc, js, err := broker.ConnectNATS(url)
	require.NoError(t, err)
	defer nc.Close()
	_, err = js.Stream(ctx, strings.ToUpper(rep.Settings.Schema))
	require.ErrorIs(t, err, jetstream.ErrStreamNotFound)
}
