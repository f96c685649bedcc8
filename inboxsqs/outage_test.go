package inboxsqs_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/inboxsqs"
	"github.com/txinbox/inbox/internal/outagetest"
	"github.com/txinbox/inbox/internal/require"
	"github.com/txinbox/inbox/internal/uuid"
)

// The outage matrix on inboxsqs (see package outagetest): 2,000 messages,
// one of them poison, on a standard queue of goaws, through a consumer that
// logs in as a role of its own, while the database fails in one way per
// case. Beside outagetest's checks, the recorder in front of goaws checks
// every DeleteMessageBatch before goaws deletes: no message is deleted
// before the database has it. goaws's ApproximateReceiveCount is replaced
// with the true count (receiveCounter), so that the poison message is
// dead-lettered after exactly MaxReceives attempts.
const outageReceives = 3

// TestOutage runs the outage matrix on inboxsqs, one case after another
// (goaws's state is global, and each case reports its own CPU).
func TestOutage(t *testing.T) {
	db := outagetest.NewDB(t)
	t.Run("sqs", func(t *testing.T) {
		for _, c := range outagetest.Cases {
			t.Run(c.Name, func(t *testing.T) { runSQSOutage(t, db, c) })
		}
	})
}

// deleteGuard checks, before goaws deletes them, that the messages of each
// DeleteMessageBatch are in the database: applied or dead-lettered.
type deleteGuard struct {
	store   *outagetest.Store
	admin   *sql.DB // the superuser's
	mu      sync.Mutex
	checked int
	ahead   []string
}

func (g *deleteGuard) check(bodies []string) {
	for _, b := range bodies {
		var e event
		_ = json.Unmarshal([]byte(b), &e)
		var there bool
		err := g.admin.QueryRowContext(context.Background(), `SELECT
    EXISTS (SELECT FROM `+g.store.Effects+` WHERE event_id = $1::uuid)
 OR EXISTS (SELECT FROM `+pgx.Identifier{g.store.Schema, "inbox_dead_letters"}.Sanitize()+` WHERE message_id = $1::uuid::text)`, e.EventID).Scan(&there)
		g.mu.Lock()
		g.checked++
		switch {
		case len(g.ahead) >= 10: // enough to tell
		case err != nil:
			g.ahead = append(g.ahead, fmt.Sprintf("event %s: %v", e.EventID, err))
		case !there:
			g.ahead = append(g.ahead, "event "+e.EventID+" deleted before the database had it")
		}
		g.mu.Unlock()
	}
}

func runSQSOutage(t *testing.T, db *outagetest.DB, oc outagetest.Case) {
	ctx := context.Background()
	s := outagetest.NewStore(t, db, `CREATE TABLE %s (event_id uuid NOT NULL)`)
	rolePool, err := pgxpool.New(ctx, s.URL+"&pool_max_conns=4")
	require.NoError(t, err)
	t.Cleanup(rolePool.Close)
	d, err := inboxpgx.New(rolePool, &inboxpgx.Config{Tables: s.Tables})
	require.NoError(t, err)
	client, err := inbox.NewClient(d, s.Config())
	require.NoError(t, err)
	endpoint, rec := startGoaws()
	h := &harness{t: t, endpoint: endpoint, rec: rec, admin: newSQSClient(endpoint, http.DefaultClient), client: client}
	q := h.createQueue("outage", false)
	guard := &deleteGuard{store: s, admin: db.Admin}
	rec.guardDeletes(t, guard.check)

	// The stream: a first half before the fault, and a second half, with
	// the poison message in its middle, sent once the fault has begun.
	var healthy []string
	var poison string
	bodies := make([]string, outagetest.Events)
	for i := range bodies {
		e := event{EventID: uuid.V4(), N: i}
		if i == outagetest.Events*3/4 {
			e.Poison = "yes"
			poison = e.EventID
		} else {
			healthy = append(healthy, e.EventID)
		}
		bodies[i] = e.body()
	}
	send := func(bodies []string) {
		for len(bodies) > 0 {
			n := min(len(bodies), 10)
			var entries []types.SendMessageBatchRequestEntry
			for i, b := range bodies[:n] {
				entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(i)), MessageBody: aws.String(b)})
			}
			// goaws enqueues a batch but reports no entry either way.
			_, err := h.admin.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(q), Entries: entries})
			require.NoError(t, err)
			bodies = bodies[n:]
		}
	}
	send(bodies[:outagetest.Events/2])

	var poisonTries atomic.Int64
	handler := inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
		var e event
		if err := json.Unmarshal(msg.Payload, &e); err != nil {
			return inbox.Permanent(err)
		}
		if e.Poison != "" {
			poisonTries.Add(1)
			return oc.Poison
		}
		_, err := tx.Exec(ctx, `INSERT INTO `+s.Effects+` (event_id) VALUES ($1)`, msg.ID)
		return err
	})
	cfg := &inboxsqs.Config{
		QueueURL:          q,
		Consumer:          "billing",
		Key:               inbox.JSONKey("event_id"),
		Workers:           4,
		WaitTime:          testWait,
		VisibilityTimeout: 5 * time.Second,
		MaxReceives:       outageReceives,
		RetryBackoff:      time.Second,
		MaxRetryBackoff:   2 * time.Second,
		ShutdownTimeout:   10 * time.Second,
		Logger:            s.Logger(),
	}
	r := h.start(cfg, handler, nil)

	s.WaitApplied(t, outagetest.Events/2)
	s.Fault(t, oc, func() { send(bodies[outagetest.Events/2:]) })
	s.WaitApplied(t, len(healthy))
	outagetest.Eventually(t, "the poison message dead-lettered", func() (bool, error) {
		n, err := s.DeadLetters()
		return n > 0, err
	})
	outagetest.Eventually(t, "the queue drained", func() (bool, error) { return h.queued(q) == 0, nil })
	r.stop()

	s.RequireOutcome(t, oc, healthy, poison, outageReceives)
	// A try whose connection the fault broke is not an attempt.
	require.GreaterOrEqual(t, poisonTries.Load(), int64(outageReceives))
	guard.mu.Lock()
	defer guard.mu.Unlock()
	require.Empty(t, guard.ahead, "messages deleted before the database had them")
	require.Positive(t, guard.checked)
}
