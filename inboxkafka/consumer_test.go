package inboxkafka_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxkafka"
	"github.com/txinbox/inbox/internal/uuid"
)

// TestMembersJoinAndLeaveUnderLoad is case (c): three consumers join and
// leave the group, over and over, while 10,000 records are produced and
// consumed. The records come in chunks, and each membership change comes
// once a tenth of the latest chunk is applied, so that partitions move
// while records wait for them.
func TestMembersJoinAndLeaveUnderLoad(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto protocol) {
		e := newEnv(t, proto, envOpts{partitions: 6})
		const chunks, perChunk = 10, 1000
		evs := events(chunks*perChunk, 60)
		var tl tally
		cfg := consumerConfig()
		cfg.MaxBatch = 100
		cfg.OnResult = tl.observe

		running := map[string]*runner{}
		join := func(name string) { running[name] = e.start(name, cfg, e.handler()) }
		leave := func(name string) { running[name].stop(t); delete(running, name) }
		steps := []struct {
			name string
			do   func()
		}{
			{"b joins", func() { join("b") }},
			{"c joins", func() { join("c") }},
			{"a leaves", func() { leave("a") }},
			{"a2 joins", func() { join("a2") }},
			{"b leaves", func() { leave("b") }},
			{"c leaves", func() { leave("c") }},
			{"b2 joins", func() { join("b2") }},
			{"c2 joins", func() { join("c2") }},
			{"a2 leaves", func() { leave("a2") }},
			{"b2 leaves", func() { leave("b2") }},
		}
		join("a")
		underLoad := 0
		for i, step := range steps {
			e.produce(evs[i*perChunk : (i+1)*perChunk])
			e.waitApplied(i*perChunk+perChunk/10, 2*time.Minute)
			step.do()
			applied, err := e.appliedCount()
			require.NoError(t, err)
			if applied < (i+1)*perChunk {
				underLoad++
			}
			t.Logf("%s with %d of %d records applied", step.name, applied, (i+1)*perChunk)
		}
		e.waitApplied(len(evs), 3*time.Minute)
		e.waitCommittedToEnd(time.Minute)
		leave("c2")

		e.requireExactlyOnce(ids(evs))
		t.Logf("%d of %d membership changes with records waiting; %d applied, %d redelivered duplicates skipped",
			underLoad, len(steps), tl.applied.Load(), tl.duplicates.Load())
	}, eager)
}

// TestRevokeCommitsBeforeTheRebalance checks the revoke path: a consumer
// that loses partitions to a new member finishes its transactions in
// flight and commits their offsets before the rebalance goes on, so the new
// member starts where it stopped and receives no record twice.
func TestRevokeCommitsBeforeTheRebalance(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto protocol) {
		e := newEnv(t, proto, envOpts{partitions: 6})
		evs := events(3000, 60)
		var ta, tb tally
		cfg := consumerConfig()
		cfg.MaxBatch = 10
		cfg.OnResult = ta.observe
		a := e.start("a", cfg, e.handler())
		sent := 600
		e.produce(evs[:sent])
		e.waitApplied(100, time.Minute)
		cfg.OnResult = tb.observe
		b := e.start("b", cfg, e.handler())
		// However long the rebalance takes, keep a few records coming, one
		// chunk whenever the consumers have caught up, until one reaches b:
		// a fast a must not drain the topic before b has partitions.
		waitFor(t, 2*time.Minute, "a partition to move to the new member", func() (bool, error) {
			if tb.applied.Load() > 0 {
				return true, nil
			}
			applied, err := e.appliedCount()
			if err != nil || applied < sent || sent == len(evs) {
				return false, err
			}
			next := min(sent+6, len(evs))
			e.produce(evs[sent:next])
			sent = next
			return false, nil
		})
		evs = evs[:sent]
		e.waitApplied(len(evs), 2*time.Minute)
		e.waitCommittedToEnd(time.Minute)
		b.stop(t)
		a.stop(t)

		e.requireExactlyOnce(ids(evs))
		require.Positive(t, tb.applied.Load(), "no partition moved to the new member")
		require.Zero(t, ta.duplicates.Load()+tb.duplicates.Load(), "a record was delivered again after a revoke")
		t.Logf("a applied %d, b applied %d", ta.applied.Load(), tb.applied.Load())
	}, eager)
}

// TestOffsetCommitErrors is case (d): the broker fails offset commits with
// ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID and REBALANCE_IN_PROGRESS. It fails
// every commit until the consumer has tried to commit the end of every
// partition; by then every record is processed and marked, so no new mark
// will ever ask for another commit. kgo does not retry a failed commit: only
// the consumer's own retries can commit the partitions to their end.
func TestOffsetCommitErrors(t *testing.T) {
	for _, injected := range []*kerr.Error{kerr.IllegalGeneration, kerr.UnknownMemberID, kerr.RebalanceInProgress} {
		t.Run(injected.Message, func(t *testing.T) {
			t.Parallel()
			forEachProtocol(t, func(t *testing.T, proto protocol) {
				e := newEnv(t, proto, envOpts{partitions: 3})
				evs := events(150, 9)
				e.produce(evs)
				end := e.highWatermarks()

				var (
					mu      sync.Mutex
					failing = true
					failed  int
					tried   = map[int32]int64{}
				)
				e.cluster.ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
					r := req.(*kmsg.OffsetCommitRequest)
					mu.Lock()
					defer mu.Unlock()
					if r.Group != e.group || !failing {
						return nil, nil, false
					}
					e.cluster.KeepControl()
					failed++
					for _, rt := range r.Topics {
						for _, p := range rt.Partitions {
							tried[p.Partition] = max(tried[p.Partition], p.Offset)
						}
					}
					return failCommit(r, injected), nil, true
				})
				var tl tally
				cfg := consumerConfig()
				cfg.MaxBatch = 10
				cfg.OnResult = tl.observe
				r := e.start("a", cfg, e.handler())
				waitFor(t, 2*time.Minute, "a failed commit of the end of every partition", func() (bool, error) {
					mu.Lock()
					defer mu.Unlock()
					for p, off := range end {
						if tried[p] != off {
							return false, nil
						}
					}
					failing = false
					return true, nil
				})
				e.waitCommittedToEnd(time.Minute)
				r.stop(t)

				mu.Lock()
				require.Positive(t, failed)
				mu.Unlock()
				e.requireExactlyOnce(ids(evs))
			})
		})
	}
}

// failCommit answers an offset commit with err for every partition.
func failCommit(req *kmsg.OffsetCommitRequest, err *kerr.Error) *kmsg.OffsetCommitResponse {
	resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
	for _, t := range req.Topics {
		rt := kmsg.NewOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		rt.TopicID = t.TopicID
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetCommitResponseTopicPartition()
			rp.Partition = p.Partition
			rp.ErrorCode = err.Code
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// poisonHandler applies effect, except for records whose value names a
// failure.
func (e *env) poisonHandler() inbox.Handler[pgx.Tx] {
	return inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
		switch string(msg.Payload) {
		case "permanent":
			return inbox.Permanent(errors.New("the amount is negative"))
		case "flaky":
			return errors.New("the downstream service says no")
		case "panic":
			panic("the handler has a bug")
		}
		return effect(ctx, e.effects, tx, msg)
	})
}

// TestPoisonRecordsAreDeadLettered is case (f): records that cannot be
// applied are dead-lettered, with their reason and coordinates, and
// produced to the dead-letter topic; their partition moves on past them.
func TestPoisonRecordsAreDeadLettered(t *testing.T) {
	for _, batch := range []int{1, 50} {
		t.Run("batch="+strconv.Itoa(batch), func(t *testing.T) {
			t.Parallel()
			forEachProtocol(t, func(t *testing.T, proto protocol) {
				dlq := "dead-" + strconv.Itoa(batch) + "-" + proto.name
				e := newEnv(t, proto, envOpts{partitions: 1, extraTopics: []string{dlq}})
				good := events(3, 1)
				bad := []event{
					{id: uuid.V4(), key: "k0", n: 1, partition: -1, value: "permanent"},
					{id: "", key: "k0", n: 2, partition: -1},
					{id: "not-a-uuid", key: "k0", n: 3, partition: -1},
					{id: uuid.V4(), key: "k0", n: 4, partition: -1, value: "flaky"},
					{id: uuid.V4(), key: "k0", n: 5, partition: -1, value: "panic"},
				}
				evs := append([]event{good[0]}, bad...)
				evs = append(evs, good[1:]...)
				var tl tally
				cfg := consumerConfig()
				cfg.MaxBatch = batch
				cfg.MaxDeliveries = 3
				cfg.DeadLetterTopic = dlq
				cfg.OnResult = tl.observe
				r := e.start("a", cfg, e.poisonHandler())
				e.produce(evs)
				e.waitCommittedToEnd(2 * time.Minute)
				r.stop(t)

				e.requireExactlyOnce(ids(good))
				require.Equal(t, map[int32]int64{0: int64(len(evs))}, e.committed())
				require.EqualValues(t, len(bad), tl.deadLettered.Load())

				ds := e.deadLetters()
				require.Len(t, ds, len(bad))
				want := []struct {
					reason   string
					attempts int
					id       string
				}{
					{inbox.ReasonPermanent, 1, bad[0].id},
					{inbox.ReasonNoID, 0, ""},
					{inbox.ReasonMalformedID, 0, ""},
					{inbox.ReasonMaxAttempts, 3, bad[3].id},
					{inbox.ReasonMaxAttempts, 3, bad[4].id},
				}
				for i, d := range ds {
					require.Equal(t, "billing", d.Consumer)
					require.Equal(t, want[i].reason, d.Reason, "dead letter %d", i)
					require.Equal(t, want[i].attempts, d.Attempts, "dead letter %d", i)
					require.Equal(t, want[i].id, d.MessageID, "dead letter %d", i)
					require.Equal(t, inboxkafka.Transport, d.Transport)
					require.Equal(t, e.topic, d.Queue)
					require.Equal(t, int32(0), d.Partition)
					require.Equal(t, int64(i+1), d.Offset)
					require.Equal(t, []byte("k0"), d.Key)
					require.Equal(t, strconv.Itoa(bad[i].n), d.Headers["n"])
					require.NotEmpty(t, d.Error)
					require.False(t, d.FirstSeen.IsZero())
					require.False(t, d.LastSeen.IsZero())
				}
				require.Equal(t, []byte("permanent"), ds[0].Payload)

				// The dead-letter topic has a copy of each, in order.
				cl, err := kgo.NewClient(kgo.SeedBrokers(e.seeds...), kgo.ConsumeTopics(dlq),
					kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
				require.NoError(t, err)
				defer cl.Close()
				var got []*kgo.Record
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				for len(got) < len(bad) && ctx.Err() == nil {
					got = append(got, cl.PollFetches(ctx).Records()...)
				}
				require.Len(t, got, len(bad))
				for i, rec := range got {
					headers := map[string]string{}
					for _, h := range rec.Headers {
						headers[h.Key] = string(h.Value)
					}
					require.Equal(t, want[i].reason, headers[inboxkafka.HeaderDeadLetterReason])
					require.Equal(t, strconv.Itoa(i+1), headers[inboxkafka.HeaderDeadLetterOffset])
					require.Equal(t, e.topic, headers[inboxkafka.HeaderDeadLetterTopic])
					require.Equal(t, strconv.Itoa(bad[i].n), headers["n"])
				}
			})
		})
	}
}

// TestPartitionOrderPreserved is case (g): within a partition, records are
// applied in offset order, so a key's effects are applied in the order it
// was produced, even while some records fail and are retried in place.
func TestPartitionOrderPreserved(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto protocol) {
		e := newEnv(t, proto, envOpts{partitions: 4})
		const keys = 12
		evs := events(1200, keys)
		var failedOnce sync.Map
		var retried atomic.Int64
		h := inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
			if n, _ := strconv.Atoi(msg.Headers["n"]); n%7 == 3 {
				if _, loaded := failedOnce.LoadOrStore(msg.ID, true); !loaded {
					retried.Add(1)
					return errors.New("try me again")
				}
			}
			return effect(ctx, e.effects, tx, msg)
		})
		cfg := consumerConfig()
		r := e.start("a", cfg, h)
		e.produce(evs)
		e.waitApplied(len(evs), 2*time.Minute)
		r.stop(t)

		e.requireExactlyOnce(ids(evs))
		require.Positive(t, retried.Load())
		for k := range keys {
			rows, err := e.pool.Query(context.Background(), `SELECT n FROM `+e.effects+` WHERE key = $1 ORDER BY seq`, "k"+strconv.Itoa(k))
			require.NoError(t, err)
			ns, err := pgx.CollectRows(rows, pgx.RowTo[int])
			require.NoError(t, err)
			for i, n := range ns {
				require.Equal(t, i+1, n, "key k%d: effect %d applied out of order: %v", k, i, ns)
			}
		}
	})
}

// TestShutdownCommitsWhatTheDatabaseCommitted: when Run's context is
// cancelled mid-stream, Run finishes the transactions in flight and commits
// exactly the offsets of what the database committed before it returns.
func TestShutdownCommitsWhatTheDatabaseCommitted(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto protocol) {
		e := newEnv(t, proto, envOpts{partitions: 3})
		evs := events(3000, 30)
		cfg := consumerConfig()
		cfg.MaxBatch = 10
		r := e.start("a", cfg, e.handler())
		e.produce(evs)
		e.waitApplied(100, time.Minute)
		r.stop(t)

		var perPartition = map[int32]int64{}
		rows, err := e.pool.Query(context.Background(), `SELECT partition, count(*), max("offset") FROM `+e.effects+` GROUP BY partition`)
		require.NoError(t, err)
		for rows.Next() {
			var p int32
			var n, maxOffset int64
			require.NoError(t, rows.Scan(&p, &n, &maxOffset))
			require.Equal(t, n, maxOffset+1, "partition %d: its effects are not a prefix", p)
			perPartition[p] = n
		}
		require.NoError(t, rows.Err())
		require.Equal(t, perPartition, e.committed(), "committed offsets differ from what the database committed")
		total := int64(0)
		for _, n := range perPartition {
			total += n
		}
		require.Less(t, total, int64(len(evs)), "everything was applied before the shutdown; the test shows nothing")

		// A new consumer takes over from there, and nothing comes twice.
		var tl tally
		cfg.OnResult = tl.observe
		r = e.start("b", cfg, e.handler())
		e.waitApplied(len(evs), 2*time.Minute)
		r.stop(t)
		e.requireExactlyOnce(ids(evs))
		require.Zero(t, tl.duplicates.Load())
	})
}

// TestRunReturnsWhenTheClientCloses: Run stops, without leaking, when the
// caller closes the client under it.
func TestRunReturnsWhenTheClientCloses(t *testing.T) {
	t.Parallel()
	e := newEnv(t, protocols[0], envOpts{partitions: 1})
	cl, err := kgo.NewClient(e.clientOpts()...)
	require.NoError(t, err)
	cfg := consumerConfig()
	c, err := inboxkafka.New(cl, e.client, e.handler(), &cfg)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- c.Run(context.Background()) }()
	evs := events(20, 1)
	e.produce(evs)
	e.waitApplied(len(evs), time.Minute)
	cl.CloseAllowingRebalance()
	select {
	case err := <-done:
		require.ErrorIs(t, err, inboxkafka.ErrClosed)
	case <-time.After(time.Minute):
		t.Fatal("Run did not return after the client closed")
	}
	e.requireExactlyOnce(ids(evs))
	require.Equal(t, map[int32]int64{0: int64(len(evs))}, e.committed())
}
