package inboxpgx_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/inboxtest"
)

// pipelineFixture is a schema with an inbox and an accounts table, and a
// pipelined handler that adds a message's payload amount to account 1.
type pipelineFixture struct {
	d        *inboxpgx.Driver
	accounts string
	// described counts the calls of the handler's function: it runs for
	// duplicates too.
	described atomic.Int32
}

func newPipelineFixture(t *testing.T, pool *pgxpool.Pool) *pipelineFixture {
	t.Helper()
	d, schema := newDriver(t, inboxdriver.Tables{})
	if pool != nil {
		var err error
		d, err = inboxpgx.New(pool, &inboxpgx.Config{Tables: inboxdriver.Tables{Schema: schema}})
		require.NoError(t, err)
	}
	return &pipelineFixture{d: d, accounts: createAccounts(t, d.Pool(), schema, 1)}
}

// credit queues: add the payload, a number, to account 1; an UPDATE that
// matches no row is an error.
func (f *pipelineFixture) credit() inboxpgx.PipelineFunc {
	return func(ctx context.Context, msg inbox.Message, b *pgx.Batch) error {
		f.described.Add(1)
		var amount int
		if _, err := fmt.Sscan(string(msg.Payload), &amount); err != nil {
			return inbox.Permanent(fmt.Errorf("payload %q is not an amount", msg.Payload))
		}
		b.Queue(`UPDATE `+f.accounts+` SET balance = balance + $1 WHERE id = 1`, amount).Exec(func(ct pgconn.CommandTag) error {
			if ct.RowsAffected() != 1 {
				return errors.New("account 1 is missing")
			}
			return nil
		})
		return nil
	}
}

func (f *pipelineFixture) balance(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, f.d.Pool().QueryRow(context.Background(), `SELECT balance FROM `+f.accounts+` WHERE id = 1`).Scan(&n))
	return n
}

func (f *pipelineFixture) claimed(t *testing.T, consumer, id string) bool {
	t.Helper()
	var ok bool
	require.NoError(t, f.d.Pool().QueryRow(context.Background(),
		`SELECT EXISTS (SELECT FROM `+f.d.Tables().Qualify(inboxdriver.DialectPostgres, f.d.Tables().Inbox)+` WHERE consumer_name = $1 AND message_id = $2)`, consumer, id).Scan(&ok))
	return ok
}

func credit(id string, amount int) inbox.Message {
	return inbox.Message{ID: id, Payload: fmt.Appendf(nil, "%d", amount)}
}

// A pipelined handler applies a new message once; a redelivery is a
// Duplicate, and its statements do not run.
func TestPipelineFuncAppliesOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newPipelineFixture(t, nil)
	c := newClient(t, f.d, nil)
	id := inboxtest.NewID()
	inboxtest.RequireApplied(t)(c.Process(ctx, "billing", credit(id, 7), f.credit()))
	require.Equal(t, 7, f.balance(t))
	for range 3 {
		inboxtest.RequireDuplicate(t)(c.Process(ctx, "billing", credit(id, 7), f.credit()))
	}
	require.Equal(t, 7, f.balance(t))
	// The function describes the work before the claim is known, for the
	// new message and the first duplicate; after a duplicate, the claim
	// comes first until a message is new.
	require.Equal(t, int32(2), f.described.Load())
	next := inboxtest.NewID()
	inboxtest.RequireApplied(t)(c.Process(ctx, "billing", credit(next, 1), f.credit()))
	inboxtest.RequireDuplicate(t)(c.Process(ctx, "billing", credit(next, 1), f.credit()))
	require.Equal(t, 8, f.balance(t))
	require.Equal(t, int32(4), f.described.Load())

	// Where the work cannot go with the claim, Handle runs it in the
	// transaction.
	a, b := inboxtest.NewID(), inboxtest.NewID()
	res, err := c.ProcessBatch(ctx, "billing", []inbox.Message{credit(a, 10), credit(id, 7), credit(b, 100)}, f.credit())
	require.NoError(t, err)
	require.Equal(t, []inbox.Outcome{inbox.Applied, inbox.Duplicate, inbox.Applied}, []inbox.Outcome{res[0].Outcome, res[1].Outcome, res[2].Outcome})
	require.Equal(t, 118, f.balance(t))
}

// Failures of a pipelined handler, before its statements are sent, in a
// statement, in a query's callback, or a panic, leave no claim and apply
// nothing; for a duplicate they do not matter, and the outcome is
// Duplicate. Each is checked pipelined and, after a duplicate, with the
// claim first.
func TestPipelineFuncFailures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newPipelineFixture(t, nil)
	c := newClient(t, f.d, nil)

	failing := map[string]inboxpgx.PipelineFunc{
		"Describe": f.credit(), // with a payload that is not a number
		"Statement": func(ctx context.Context, msg inbox.Message, b *pgx.Batch) error {
			b.Queue(`UPDATE ` + f.accounts + ` SET balance = balance + 1 WHERE id = 1`)
			b.Queue(`SELECT 1 / 0`)
			return nil
		},
		"Callback": func(ctx context.Context, msg inbox.Message, b *pgx.Batch) error {
			b.Queue(`UPDATE `+f.accounts+` SET balance = balance + 1 WHERE id = $1`, 2).Exec(func(ct pgconn.CommandTag) error {
				if ct.RowsAffected() != 1 {
					return inbox.Permanent(errors.New("account 2 is missing"))
				}
				return nil
			})
			return nil
		},
		"Panic": func(ctx context.Context, msg inbox.Message, b *pgx.Batch) error {
			b.Queue(`UPDATE ` + f.accounts + ` SET balance = balance + 1 WHERE id = 1`)
			panic("bad message")
		},
	}
	for name, h := range failing {
		t.Run(name, func(t *testing.T) {
			consumer := "billing-" + name
			fails := func(when string) {
				t.Helper()
				m := inbox.Message{ID: inboxtest.NewID(), Payload: []byte("not a number")}
				out, err := c.Process(ctx, consumer, m, h)
				require.Error(t, err, when)
				require.NotEqual(t, inbox.Applied, out, when)
				require.False(t, f.claimed(t, consumer, m.ID), "%s: a failed message must not keep its claim", when)
				switch name {
				case "Describe", "Callback":
					require.True(t, inbox.IsPermanent(err), "%s: want a permanent error, got %v", when, err)
				case "Statement":
					var pgErr *pgconn.PgError
					require.True(t, errors.As(err, &pgErr) && pgErr.Code == "22012", "%s: want division_by_zero, got %v", when, err)
				case "Panic":
					var pe *inbox.PanicError
					require.True(t, errors.As(err, &pe), "%s: want a PanicError, got %v", when, err)
				}
			}
			fails("pipelined")
			done := inboxtest.NewID()
			inboxtest.RequireApplied(t)(c.Process(ctx, consumer, credit(done, 1), f.credit()))
			// The same failure on an id already applied is a Duplicate.
			inboxtest.RequireDuplicate(t)(c.Process(ctx, consumer, inbox.Message{ID: done, Payload: []byte("not a number")}, h))
			inboxtest.RequireDuplicate(t)(c.Process(ctx, consumer, inbox.Message{ID: done, Payload: []byte("not a number")}, h))
			fails("after a duplicate")
		})
	}
	require.Equal(t, len(failing), f.balance(t))
}

// A pipelined claim waits behind an in-flight first delivery as any claim
// does: when the first commits, the second is a Duplicate and its work does
// not run; when the first rolls back, the second applies.
func TestPipelineFuncConcurrentDuplicate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newPipelineFixture(t, nil)
	waiting := func() {
		t.Helper()
		for {
			n, err := waitingClaims(ctx, f.d.Pool(), f.d.Tables().Schema)
			require.NoError(t, err)
			if n > 0 {
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	for _, firstCommits := range []bool{true, false} {
		t.Run(fmt.Sprintf("FirstCommits=%v", firstCommits), func(t *testing.T) {
			c := newClient(t, f.d, &inbox.Config{LockTimeout: -1})
			before := f.balance(t)
			id := inboxtest.NewID()
			tx, claimed, err := f.d.BeginClaim(ctx, &inboxdriver.ClaimParams{Consumer: "billing", IDs: []string{id}})
			require.NoError(t, err)
			require.True(t, claimed[0])
			type result struct {
				out inbox.Outcome
				err error
			}
			second := make(chan result, 1)
			go func() {
				out, err := c.Process(ctx, "billing", credit(id, 5), f.credit())
				second <- result{out, err}
			}()
			waiting()
			if firstCommits {
				require.NoError(t, tx.Commit(ctx))
			} else {
				require.NoError(t, tx.Rollback(ctx))
			}
			r := <-second
			require.NoError(t, r.err)
			if firstCommits {
				require.Equal(t, inbox.Duplicate, r.out)
				require.Equal(t, before, f.balance(t))
			} else {
				require.Equal(t, inbox.Applied, r.out)
				require.Equal(t, before+5, f.balance(t))
			}
		})
	}
}

// The lock timeout bounds the pipelined claim and not the statements after
// it, which run under the session's own lock_timeout.
func TestPipelineFuncLockTimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newPipelineFixture(t, nil)
	c := newClient(t, f.d, &inbox.Config{LockTimeout: 50 * time.Millisecond})
	var seen string
	show := inboxpgx.PipelineFunc(func(ctx context.Context, msg inbox.Message, b *pgx.Batch) error {
		b.Queue(`SHOW lock_timeout`).QueryRow(func(row pgx.Row) error { return row.Scan(&seen) })
		return nil
	})
	inboxtest.RequireApplied(t)(c.Process(ctx, "billing", inbox.Message{ID: inboxtest.NewID()}, show))
	require.Equal(t, "0", seen)

	id := inboxtest.NewID()
	tx, claimed, err := f.d.BeginClaim(ctx, &inboxdriver.ClaimParams{Consumer: "billing", IDs: []string{id}})
	require.NoError(t, err)
	require.True(t, claimed[0])
	defer tx.Rollback(ctx)
	_, err = c.Process(ctx, "billing", credit(id, 5), f.credit())
	require.ErrorIs(t, err, inbox.ErrLockTimeout)
	require.Equal(t, 0, f.balance(t))
}

// noDefer is a store that never defers a claim.
type noDefer struct{ inboxdriver.Driver[pgx.Tx] }

func (n noDefer) BeginClaim(ctx context.Context, p *inboxdriver.ClaimParams) (pgx.Tx, []bool, error) {
	q := *p
	q.Pipelined = false
	return n.Driver.BeginClaim(ctx, &q)
}

// A store that does not defer the claim runs a PipelineFunc after the
// claim, as any handler: a duplicate does not even describe its work.
func TestPipelineFuncWithoutDeferral(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newPipelineFixture(t, nil)
	c, err := inbox.NewClient[pgx.Tx](noDefer{f.d}, nil)
	require.NoError(t, err)
	id := inboxtest.NewID()
	inboxtest.RequireApplied(t)(c.Process(ctx, "billing", credit(id, 3), f.credit()))
	inboxtest.RequireDuplicate(t)(c.Process(ctx, "billing", credit(id, 3), f.credit()))
	require.Equal(t, 3, f.balance(t))
	require.Equal(t, int32(1), f.described.Load(), "Handle runs after the claim, and only for a new message")
}

// creditBatch queues one UPDATE per message, as credit does; a message
// whose payload is "poison" queues a statement that fails.
func (f *pipelineFixture) creditBatch() inboxpgx.PipelineBatchFunc {
	return func(ctx context.Context, msgs []inbox.Message, b *pgx.Batch) error {
		f.described.Add(1)
		for _, m := range msgs {
			if string(m.Payload) == "poison" {
				b.Queue(`SELECT 1 / 0`)
				continue
			}
			var amount int
			if _, err := fmt.Sscan(string(m.Payload), &amount); err != nil {
				return inbox.Permanent(fmt.Errorf("payload %q is not an amount", m.Payload))
			}
			b.Queue(`UPDATE `+f.accounts+` SET balance = balance + $1 WHERE id = 1`, amount)
		}
		return nil
	}
}

func outcomes(t *testing.T, res []inbox.BatchResult) []string {
	t.Helper()
	out := make([]string, len(res))
	for i, r := range res {
		if r.Err != nil {
			out[i] = "error"
		} else {
			out[i] = r.Outcome.String()
		}
	}
	return out
}

// A PipelineBatchFunc applies an all-new batch in one transaction; a batch
// with a duplicate is claimed on its own and its new messages applied; a
// message whose statement fails, or that cannot be described, is isolated
// and fails alone.
func TestPipelineBatchFunc(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newPipelineFixture(t, nil)
	c := newClient(t, f.d, nil)
	h := f.creditBatch()
	batch := func(msgs ...inbox.Message) []string {
		t.Helper()
		res, err := c.ProcessBatch(ctx, "billing", msgs, h)
		require.NoError(t, err)
		return outcomes(t, res)
	}
	a, b := inboxtest.NewID(), inboxtest.NewID()
	require.Equal(t, []string{"applied", "applied"}, batch(credit(a, 1), credit(b, 2)))
	require.Equal(t, 3, f.balance(t))
	require.Equal(t, int32(1), f.described.Load(), "one description for the whole batch")

	require.Equal(t, []string{"applied", "duplicate", "applied"},
		batch(credit(inboxtest.NewID(), 10), credit(a, 1), credit(inboxtest.NewID(), 20)))
	require.Equal(t, 33, f.balance(t))
	// After the duplicate, the next batch is claimed first; being all new,
	// it lets pipelining resume.
	require.Equal(t, []string{"applied", "applied"}, batch(credit(inboxtest.NewID(), 100), credit(inboxtest.NewID(), 200)))
	require.Equal(t, 333, f.balance(t))

	poison := inbox.Message{ID: inboxtest.NewID(), Payload: []byte("poison")}
	undecodable := inbox.Message{ID: inboxtest.NewID(), Payload: []byte("?")}
	require.Equal(t, []string{"applied", "error", "applied", "error", "applied"},
		batch(credit(inboxtest.NewID(), 1000), poison, credit(inboxtest.NewID(), 2000), undecodable, credit(inboxtest.NewID(), 4000)))
	require.Equal(t, 7333, f.balance(t))
	require.False(t, f.claimed(t, "billing", poison.ID))
	require.False(t, f.claimed(t, "billing", undecodable.ID))
}
