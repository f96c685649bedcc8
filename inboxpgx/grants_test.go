package inboxpgx_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/inboxtest"
	"github.com/txinbox/inbox/inboxtransport"
	"github.com/txinbox/inbox/internal/testdb"
)

// grantsFixture is a migrated schema, and the qualified names of its
// tables, for roles that hold only the grants docs/GRANTS.md lists.
type grantsFixture struct {
	schema                                 string
	inbox, deadLetters, effects, takeovers string
	admin                                  *inboxpgx.Driver // the tables' owner
}

func newGrantsFixture(t *testing.T) *grantsFixture {
	d, schema := newDriver(t, inboxdriver.Tables{})
	return &grantsFixture{
		schema:      schema,
		inbox:       pgx.Identifier{schema, "inbox"}.Sanitize(),
		deadLetters: pgx.Identifier{schema, "inbox_dead_letters"}.Sanitize(),
		effects:     pgx.Identifier{schema, "inbox_effects"}.Sanitize(),
		takeovers:   pgx.Identifier{schema, "inbox_takeovers"}.Sanitize(),
		admin:       d,
	}
}

// roleClient returns a role that holds grants, and a client that connects
// as it.
func (f *grantsFixture) roleClient(t *testing.T, grants ...string) (string, *inbox.Client[pgx.Tx]) {
	t.Helper()
	role, url := testdb.Role(t)
	q := testdb.QuoteIdent(role)
	testdb.Exec(t, `GRANT USAGE ON SCHEMA `+testdb.QuoteIdent(f.schema)+` TO `+q)
	for _, g := range grants {
		testdb.Exec(t, `GRANT `+g+` TO `+q)
	}
	pool, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	d, err := inboxpgx.New(pool, &inboxpgx.Config{Tables: inboxdriver.Tables{Schema: f.schema}})
	require.NoError(t, err)
	c, err := inbox.NewClient(d, &inbox.Config{ReplayHorizon: time.Hour, Retention: time.Hour, CleanerInterval: time.Hour})
	require.NoError(t, err)
	return q, c
}

// consumerGrants are the grants of a Kafka consumer that dead-letters and
// uses the effects ledger, as docs/GRANTS.md lists them.
func (f *grantsFixture) consumerGrants() []string {
	return []string{
		`SELECT, INSERT ON ` + f.inbox,
		`SELECT, INSERT, UPDATE (reason, error_text, attempts, last_seen_at) ON ` + f.deadLetters,
		`SELECT, INSERT, UPDATE ON ` + f.effects,
		`SELECT, INSERT, UPDATE, DELETE ON ` + f.takeovers,
	}
}

// cleanerGrants are the grants of RunCleaner's role.
func (f *grantsFixture) cleanerGrants() []string {
	return []string{
		`SELECT, DELETE, UPDATE (processed_at) ON ` + f.inbox,
		`SELECT, DELETE ON ` + f.effects,
	}
}

// consume runs everything a consumer does: a claim, a pipelined claim, a
// batch, an effect, a dead letter twice (the second updates the first),
// and, as inboxkafka does, a takeover, the start of a record, a second
// takeover that counts it, and a clean stop.
func consume(ctx context.Context, c *inbox.Client[pgx.Tx]) error {
	const source = "kafka:orders/0"
	ledger, err := inboxtransport.NewLedger(c, "billing")
	if err != nil {
		return err
	}
	if _, err := ledger.Record(ctx, source, 1); err != nil {
		return err
	}
	if err := ledger.Start(ctx, source, 1); err != nil {
		return err
	}
	if _, err := ledger.Record(ctx, source, 1); err != nil {
		return err
	}
	if err := ledger.Done(ctx, source, 1); err != nil {
		return err
	}
	effect := inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, m inbox.Message) error {
		_, err := c.Effect(ctx, m, "notify", func(context.Context, string) ([]byte, error) { return []byte("ok"), nil }, nil)
		return err
	})
	pipelined := inboxpgx.PipelineFunc(func(context.Context, inbox.Message, *pgx.Batch) error { return nil })
	if _, err := c.Process(ctx, "billing", inbox.Message{ID: inboxtest.NewID()}, effect); err != nil {
		return err
	}
	if _, err := c.Process(ctx, "billing", inbox.Message{ID: inboxtest.NewID()}, pipelined); err != nil {
		return err
	}
	// A batch claimed with ON CONFLICT DO NOTHING, which needs SELECT on
	// the inbox, and one deferred with the pipelined handler.
	for _, h := range []inbox.Handler[pgx.Tx]{effect, pipelined} {
		rs, err := c.ProcessBatch(ctx, "billing", []inbox.Message{{ID: inboxtest.NewID()}, {ID: inboxtest.NewID()}}, h)
		if err != nil {
			return err
		}
		if rs[0].Err != nil {
			return rs[0].Err
		}
	}
	dl := inbox.DeadLetterParams{Consumer: "billing", Message: inbox.Message{ID: inboxtest.NewID()}, Reason: inbox.ReasonPermanent}
	if err := c.DeadLetter(ctx, dl); err != nil {
		return err
	}
	return c.DeadLetter(ctx, dl) // the redelivery that raced the ack
}

// TestGrants: a consumer and a cleaner work with exactly the grants
// docs/GRANTS.md lists, and each grant is needed: without it the store
// refuses with inbox.ErrPermissionDenied, which is the store's fault.
func TestGrants(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newGrantsFixture(t)

	t.Run("consumer", func(t *testing.T) {
		role, c := f.roleClient(t, f.consumerGrants()...)
		require.NoError(t, consume(ctx, c))
		for _, missing := range []string{
			`INSERT ON ` + f.inbox,
			`SELECT ON ` + f.inbox,
			`UPDATE ON ` + f.deadLetters,
			`SELECT ON ` + f.deadLetters,
			`UPDATE ON ` + f.effects,
			`SELECT ON ` + f.takeovers,
			`INSERT ON ` + f.takeovers,
			`UPDATE ON ` + f.takeovers,
			`DELETE ON ` + f.takeovers,
		} {
			testdb.Exec(t, `REVOKE `+missing+` FROM `+role)
			err := consume(ctx, c)
			require.ErrorIs(t, err, inbox.ErrPermissionDenied, "without %s", missing)
			require.Equal(t, inbox.FaultStore, inbox.Judge(err), "without %s", missing)
			for _, g := range f.consumerGrants() {
				testdb.Exec(t, `GRANT `+g+` TO `+role)
			}
			require.NoError(t, consume(ctx, c), "granted again")
		}
	})

	t.Run("replay", func(t *testing.T) {
		// The operator marks dead letters (inbox deadletters replay); the
		// application replays them with its handler, as the consumer.
		replayer := append(f.consumerGrants(), `DELETE, UPDATE (replay_requested_at) ON `+f.deadLetters)
		operatorGrants := []string{`SELECT, UPDATE (replay_requested_at) ON ` + f.deadLetters}
		appRole, app := f.roleClient(t, replayer...)
		opRole, op := f.roleClient(t, operatorGrants...)
		failing := inboxtest.NewID()
		h := inbox.HandlerFunc[pgx.Tx](func(_ context.Context, _ pgx.Tx, m inbox.Message) error {
			if m.ID == failing {
				return errors.New("still failing")
			}
			return nil
		})
		replay := func() error {
			for _, id := range []string{inboxtest.NewID(), failing} {
				dl := inbox.DeadLetterParams{Consumer: "billing", Message: inbox.Message{ID: id}, Reason: inbox.ReasonPermanent}
				if err := app.DeadLetter(ctx, dl); err != nil {
					return err
				}
			}
			if _, err := op.Admin().DeadLetterReplay(ctx, inbox.DeadLetterReplayParams{Consumer: "billing"}); err != nil {
				return err
			}
			_, err := app.ProcessReplays(ctx, "billing", h)
			return err
		}
		require.NoError(t, replay())
		for _, tt := range []struct {
			role, missing string
			grants        []string
		}{
			{opRole, `UPDATE (replay_requested_at) ON ` + f.deadLetters, operatorGrants},
			{opRole, `SELECT ON ` + f.deadLetters, operatorGrants},
			{appRole, `DELETE ON ` + f.deadLetters, replayer},                       // an applied replay's dead letter
			{appRole, `UPDATE (replay_requested_at) ON ` + f.deadLetters, replayer}, // a failed replay's mark
		} {
			testdb.Exec(t, `REVOKE `+tt.missing+` FROM `+tt.role)
			require.ErrorIs(t, replay(), inbox.ErrPermissionDenied, "without %s", tt.missing)
			for _, g := range tt.grants {
				testdb.Exec(t, `GRANT `+g+` TO `+tt.role)
			}
			// What the failed replay left marked goes now.
			require.NoError(t, replay(), "granted again")
		}
	})

	t.Run("cleaner", func(t *testing.T) {
		// Rows older than the retention, with their ledger entries.
		_, owner := f.roleClient(t, f.consumerGrants()...)
		require.NoError(t, consume(ctx, owner))
		_, err := f.admin.Pool().Exec(ctx, `UPDATE `+f.inbox+` SET processed_at = processed_at - interval '2 hours'`)
		require.NoError(t, err)

		role, c := f.roleClient(t, f.cleanerGrants()...)
		for _, missing := range []string{
			`DELETE ON ` + f.inbox,
			`UPDATE ON ` + f.inbox, // the purge's FOR UPDATE SKIP LOCKED
			`DELETE ON ` + f.effects,
		} {
			testdb.Exec(t, `REVOKE `+missing+` FROM `+role)
			// A cleaner that cannot clean says so: it returns. (One
			// that only logged would run until the deadline, and
			// return nil.)
			cctx, cancel := context.WithTimeout(ctx, time.Minute)
			err := c.Admin().RunCleaner(cctx)
			cancel()
			require.ErrorIs(t, err, inbox.ErrPermissionDenied, "without %s", missing)
			for _, g := range f.cleanerGrants() {
				testdb.Exec(t, `GRANT `+g+` TO `+role)
			}
		}
		// Entries of messages that were never applied stay: they guard a
		// replay of their dead letters.
		entries := `SELECT count(*) FROM ` + f.effects + ` e WHERE EXISTS
 (SELECT FROM ` + f.inbox + ` i WHERE i.consumer_name = e.consumer_name AND i.message_id = e.message_id)`
		var applied int
		require.NoError(t, f.admin.Pool().QueryRow(ctx, entries).Scan(&applied))
		require.Positive(t, applied)
		n, err := c.Admin().Purge(ctx, inbox.PurgeParams{OlderThan: time.Hour})
		require.NoError(t, err)
		require.Positive(t, n)
		var rows, orphans int
		require.NoError(t, f.admin.Pool().QueryRow(ctx, `SELECT count(*) FROM `+f.inbox).Scan(&rows))
		require.Zero(t, rows, "the old rows")
		require.NoError(t, f.admin.Pool().QueryRow(ctx, `SELECT count(*) FROM `+f.effects+` WHERE state = 'done'`).Scan(&orphans))
		require.Zero(t, orphans, "the ledger entries of the purged messages")

		// A consumer's role may not purge: its cleaner stops at once.
		_, consumer := f.roleClient(t, f.consumerGrants()...)
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		err = consumer.Admin().RunCleaner(cctx)
		require.ErrorIs(t, err, inbox.ErrPermissionDenied)
	})
}
