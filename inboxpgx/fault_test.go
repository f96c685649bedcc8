package inboxpgx_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/inboxtest"
	"github.com/txinbox/inbox/internal/testdb"
)

// A handler's io.EOF or net.Error from its own work (an empty body, a
// webhook host that does not resolve) is the message's: the batch is split
// around it, its batch-mates are applied, and it is an attempt. Taken for a
// lost connection, it used to stop its partition for ever.
func TestHandlersOwnEOFIsTheMessages(t *testing.T) {
	t.Parallel()
	for _, poison := range []error{
		fmt.Errorf("decode body: %w", io.EOF),
		fmt.Errorf("gunzip: %w", io.ErrUnexpectedEOF),
		fmt.Errorf("webhook: %w", &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "hooks.invalid", IsNotFound: true}}),
	} {
		t.Run(poison.Error(), func(t *testing.T) {
			t.Parallel()
			d, _ := newDriver(t, inboxdriver.Tables{})
			c := newClient(t, d, nil)
			msgs := make([]inbox.Message, 5)
			for i := range msgs {
				msgs[i] = inbox.Message{ID: inboxtest.NewID()}
			}
			bad := msgs[2].ID
			h := inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, m inbox.Message) error {
				if m.ID == bad {
					return poison
				}
				_, err := tx.Exec(ctx, `SELECT 1`)
				return err
			})
			for _, ordered := range []bool{false, true} {
				var rs []inbox.BatchResult
				var err error
				if ordered {
					rs, err = c.ProcessBatchOrdered(context.Background(), "ordered", msgs, h)
				} else {
					rs, err = c.ProcessBatch(context.Background(), "billing", msgs, h)
				}
				require.NoError(t, err)
				for i, r := range rs {
					switch {
					case i == 2:
						require.ErrorIs(t, r.Err, poison)
						require.NotErrorIs(t, r.Err, inbox.ErrUnavailable)
						require.Equal(t, inbox.FaultMessage, inbox.Judge(r.Err))
					case ordered && i > 2:
						require.ErrorIs(t, r.Err, inbox.ErrNotAttempted)
					default:
						require.NoError(t, r.Err, "message %d", i)
						require.Equal(t, inbox.Applied, r.Outcome)
					}
				}
			}
		})
	}
}

// A handler whose transaction's connection broke under it failed for the
// store's reason, whatever it returned; one that marks its error
// Unavailable failed for a systemic one. Neither is the message's.
func TestHandlerFailuresThatAreNotTheMessages(t *testing.T) {
	t.Parallel()
	d, _ := newDriver(t, inboxdriver.Tables{})
	c := newClient(t, d, &inbox.Config{MaxConflictRetries: -1})
	ctx := context.Background()
	terminate := inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, m inbox.Message) error {
		_, err := tx.Exec(ctx, `SELECT pg_terminate_backend(pg_backend_pid())`)
		// A handler that hides the driver's error behind its own.
		return fmt.Errorf("save order: %v", err)
	})
	_, err := c.Process(ctx, "billing", inbox.Message{ID: inboxtest.NewID()}, terminate)
	require.ErrorIs(t, err, inbox.ErrUnavailable)
	require.Equal(t, inbox.FaultStore, inbox.Judge(err))

	down := errors.New("payment provider: 503")
	marked := inbox.HandlerFunc[pgx.Tx](func(context.Context, pgx.Tx, inbox.Message) error { return inbox.Unavailable(down) })
	_, err = c.Process(ctx, "billing", inbox.Message{ID: inboxtest.NewID()}, marked)
	require.ErrorIs(t, err, down)
	require.Equal(t, inbox.FaultSystemic, inbox.Judge(err))
	var se *inbox.StageError
	require.ErrorAs(t, err, &se)
	require.Equal(t, inbox.StageHandler, se.Stage)
}

// A connection the server refuses, with whatever SQLSTATE (here 3D000, no
// such database), is unavailability: the store's, never the message's.
func TestConnectErrorIsUnavailable(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(testdb.URL(t))
	require.NoError(t, err)
	u.Path = "/no_such_database_" + testdb.RandomSuffix()
	pool, err := pgxpool.New(context.Background(), u.String())
	require.NoError(t, err)
	defer pool.Close()
	d, err := inboxpgx.New(pool, nil)
	require.NoError(t, err)
	c := newClient(t, d, nil)
	noop := inbox.HandlerFunc[pgx.Tx](func(context.Context, pgx.Tx, inbox.Message) error { return nil })
	_, err = c.Process(context.Background(), "billing", inbox.Message{ID: inboxtest.NewID()}, noop)
	require.ErrorContains(t, err, "3D000")
	require.ErrorIs(t, err, inbox.ErrUnavailable)
	require.Equal(t, inbox.FaultStore, inbox.Judge(err))
	err = c.DeadLetter(context.Background(), inbox.DeadLetterParams{Consumer: "billing", Message: inbox.Message{ID: inboxtest.NewID()}, Reason: inbox.ReasonPermanent})
	require.ErrorIs(t, err, inbox.ErrUnavailable)
	require.Equal(t, inbox.FaultStore, inbox.Judge(err))
}

// The effects ledger is the inbox's own work: a handler that returns the
// error of a ledger write failed for the store's reason.
func TestLedgerFailureIsTheStores(t *testing.T) {
	t.Parallel()
	d, schema := newDriver(t, inboxdriver.Tables{})
	ctx := context.Background()
	_, err := d.Pool().Exec(ctx, `DROP TABLE `+pgx.Identifier{schema, "inbox_effects"}.Sanitize())
	require.NoError(t, err)
	c := newClient(t, d, nil)
	h := inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, m inbox.Message) error {
		_, err := c.Effect(ctx, m, "capture", func(context.Context, string) ([]byte, error) { return nil, nil }, nil)
		return fmt.Errorf("capture: %w", err)
	})
	_, err = c.Process(ctx, "billing", inbox.Message{ID: inboxtest.NewID()}, h)
	require.ErrorContains(t, err, "42P01")
	require.Equal(t, inbox.FaultStore, inbox.Judge(err))
}

// A handler that ends its transaction itself (it rolls back, then fails)
// hands the connection back to the pool, where another caller may take it
// at once. Judging the handler's error must not touch that connection (it
// did, and -race caught it): the error is the message's, and the message
// is not applied.
func TestHandlerThatEndsItsTransaction(t *testing.T) {
	t.Parallel()
	_, schema := newDriver(t, inboxdriver.Tables{})
	pool := ownPool(t, 1, nil)
	d, err := inboxpgx.New(pool, &inboxpgx.Config{Tables: inboxdriver.Tables{Schema: schema}})
	require.NoError(t, err)
	c := newClient(t, d, nil)
	ctx := context.Background()
	own := errors.New("refund: the amount exceeds the charge")
	other := make(chan error, 1)
	h := inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, m inbox.Message) error {
		if err := tx.Rollback(ctx); err != nil {
			return err
		}
		// Another caller takes the one connection while the client
		// judges the error.
		go func() {
			_, err := pool.Exec(context.Background(), `SELECT 1`)
			other <- err
		}()
		return own
	})
	msg := inbox.Message{ID: inboxtest.NewID()}
	_, err = c.Process(ctx, "billing", msg, h)
	require.ErrorIs(t, err, own)
	require.NotErrorIs(t, err, inbox.ErrUnavailable)
	require.Equal(t, inbox.FaultMessage, inbox.Judge(err))
	require.NoError(t, <-other)
	apply := inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, m inbox.Message) error {
		_, err := tx.Exec(ctx, `SELECT 1`)
		return err
	})
	inboxtest.RequireApplied(t)(c.Process(ctx, "billing", msg, apply))
}
