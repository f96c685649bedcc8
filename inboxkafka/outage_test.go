package inboxkafka_test

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxkafka"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/internal/outagetest"
	"github.com/txinbox/inbox/internal/require"
	"github.com/txinbox/inbox/internal/testdb"
	"github.com/txinbox/inbox/internal/uuid"
)

// The outage matrix on inboxkafka (see package outagetest): 2,000 records
// on 4 partitions, one of them poison, through a consumer that logs in as a
// role of its own, while the database fails in one way per case. Beside
// outagetest's checks, a kfake control checks every offset commit as it
// reaches the broker: no offset is committed ahead of the database.
const (
	outagePartitions = 4
	outageAttempts   = 3
)

// TestOutage runs the outage matrix on inboxkafka. The cases run one after
// another, so that the process CPU each reports while its consumer is
// paused is its own.
func TestOutage(t *testing.T) {
	db := outagetest.NewDB(t)
	t.Run("kafka", func(t *testing.T) {
		for _, c := range outagetest.Cases {
			t.Run(c.Name, func(t *testing.T) { runKafkaOutage(t, db, c) })
		}
	})
}

// commitGuard checks, as each offset commit reaches the broker and before
// the broker applies it, that every record below each committed offset is
// in the database: applied (its effect row) or dead-lettered.
type commitGuard struct {
	admin   *sql.DB // the superuser's
	store   *outagetest.Store
	mu      sync.Mutex
	checked int
	ahead   []string
}

func (g *commitGuard) check(req kmsg.Request) {
	r, ok := req.(*kmsg.OffsetCommitRequest)
	if !ok {
		return
	}
	ctx := context.Background()
	// The case's cluster has one topic, which newer requests name by its
	// id only.
	for _, rt := range r.Topics {
		for _, p := range rt.Partitions {
			var n int64
			err := g.admin.QueryRowContext(ctx, `SELECT
   (SELECT count(DISTINCT "offset") FROM `+g.store.Effects+` WHERE partition = $1 AND "offset" < $2)
 + (SELECT count(*) FROM `+pgx.Identifier{g.store.Schema, "inbox_dead_letters"}.Sanitize()+` WHERE source_partition = $1 AND source_offset < $2)`,
				p.Partition, p.Offset).Scan(&n)
			g.mu.Lock()
			g.checked++
			switch {
			case err != nil:
				g.ahead = append(g.ahead, fmt.Sprintf("partition %d at %d: %v", p.Partition, p.Offset, err))
			case n != p.Offset:
				g.ahead = append(g.ahead, fmt.Sprintf("partition %d committed at %d with only %d records below it in the database", p.Partition, p.Offset, n))
			}
			g.mu.Unlock()
		}
	}
}

func runKafkaOutage(t *testing.T, db *outagetest.DB, oc outagetest.Case) {
	ctx := context.Background()
	s := outagetest.NewStore(t, db, `CREATE TABLE %s (event_id uuid NOT NULL, partition int NOT NULL, "offset" bigint NOT NULL)`)
	rolePool, err := pgxpool.New(ctx, s.URL+"&pool_max_conns=4")
	require.NoError(t, err)
	t.Cleanup(rolePool.Close)
	d, err := inboxpgx.New(rolePool, &inboxpgx.Config{Tables: s.Tables})
	require.NoError(t, err)
	client, err := inbox.NewClient(d, s.Config())
	require.NoError(t, err)

	topic := "orders-" + testdb.RandomSuffix()
	group := "group-" + testdb.RandomSuffix()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(outagePartitions, topic))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	seeds := cluster.ListenAddrs()
	guard := &commitGuard{admin: db.Admin, store: s}
	cluster.ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		guard.check(req)
		return nil, nil, false
	})

	// The stream: a first half before the fault, and a second half, with
	// the poison record in its middle, sent once the fault has begun, so
	// that the consumer has work to fail on whatever its speed.
	var healthy []string
	var poison string
	recs := make([]*kgo.Record, outagetest.Events)
	for i := range recs {
		id := uuid.V4()
		r := &kgo.Record{Topic: topic, Partition: int32(i % outagePartitions), Value: []byte(`{"n":` + strconv.Itoa(i) + `}`),
			Headers: []kgo.RecordHeader{{Key: "event-id", Value: []byte(id)}}}
		if i == outagetest.Events*3/4 {
			poison = id
			r.Value = []byte("poison")
		} else {
			healthy = append(healthy, id)
		}
		recs[i] = r
	}
	producer, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer producer.Close()
	require.NoError(t, producer.ProduceSync(ctx, recs[:outagetest.Events/2]...).FirstErr())

	var poisonTries atomic.Int64
	h := inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
		if string(msg.Payload) == "poison" {
			poisonTries.Add(1)
			return oc.Poison
		}
		_, err := tx.Exec(ctx, `INSERT INTO `+s.Effects+` (event_id, partition, "offset") VALUES ($1, $2, $3)`,
			msg.ID, msg.Source.Partition, msg.Source.Offset)
		return err
	})
	cfg := inboxkafka.Config{
		Logger:      s.Logger(),
		Consumer:    "billing",
		Key:         inbox.HeaderKey("event-id"),
		MaxBatch:    50,
		MaxAttempts: outageAttempts,
		MinBackoff:  50 * time.Millisecond,
		MaxBackoff:  500 * time.Millisecond,
	}
	cl, err := kgo.NewClient(consumerOpts(seeds, group, topic, 10*time.Second, protocols[0])...)
	require.NoError(t, err)
	c, err := inboxkafka.New(cl, client, h, &cfg)
	require.NoError(t, err)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(2 * time.Minute):
			t.Errorf("Run did not return within 2m of its context's cancellation")
		}
		cl.Close()
	}
	t.Cleanup(stop)

	s.WaitApplied(t, outagetest.Events/2)
	s.Fault(t, oc, func() {
		require.NoError(t, producer.ProduceSync(ctx, recs[outagetest.Events/2:]...).FirstErr())
	})
	s.WaitApplied(t, len(healthy))
	outagetest.Eventually(t, "the poison record dead-lettered", func() (bool, error) {
		n, err := s.DeadLetters()
		return n > 0, err
	})
	e := &env{t: t, producer: producer, topic: topic, partitions: outagePartitions, group: group}
	e.waitCommittedToEnd(2 * time.Minute)
	stop()

	s.RequireOutcome(t, oc, healthy, poison, outageAttempts)
	// A try whose connection the fault broke is not an attempt.
	require.GreaterOrEqual(t, poisonTries.Load(), int64(outageAttempts))
	guard.mu.Lock()
	defer guard.mu.Unlock()
	require.Empty(t, guard.ahead, "offsets committed ahead of the database")
	require.Positive(t, guard.checked)
}
