package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxmigrate"
	"github.com/txinbox/inbox/inboxpgx"
)

// dupIDs is how many ids the inbox-duplicate row draws from.
const dupIDs = 20_000

// pgStore is the Postgres side of the run: the accounts, the table of the
// check-then-insert row, and the inbox.
type pgStore struct {
	// update is the side effect, the same statement for every row.
	update                   string
	checkSelect, checkInsert string
	// floorClaim and floorEnqueue are the INSERTs of the floor rows
	// (floor.go), the same text as inboxpgx's.
	floorClaim, floorEnqueue string
	inboxTable               string
	client                   *inbox.Client[pgx.Tx]
	// handler applies one message's effect. It queues the UPDATE, which
	// Process sends with BEGIN and the claim, as a user who writes this
	// handler with inboxpgx.PipelineFunc has it.
	handler inbox.Handler[pgx.Tx]
	// txHandler applies it with tx.Exec, in a round trip of its own: the
	// general form of a handler, which can read before it writes.
	txHandler inbox.Handler[pgx.Tx]
	// batchHandler applies a batch's effects in one UPDATE, as a user who
	// batches writes it.
	batchHandler inbox.BatchHandler[pgx.Tx]
	updateBatch  string
	// dupIDs are ids the inbox holds for consumer, for inbox-duplicate.
	dupIDs []string
}

// setup creates the accounts, the check-then-insert table and the inbox in
// b's schema.
func (s *pgStore) setup(ctx context.Context, b *bench) error {
	accounts := b.table("accounts")
	seen := b.table("processed")
	stmts := []struct {
		sql  string
		args []any
	}{
		{sql: `CREATE TABLE ` + accounts + ` (id integer PRIMARY KEY, balance bigint NOT NULL DEFAULT 0)`},
		{sql: `INSERT INTO ` + accounts + ` (id) SELECT generate_series(1, $1::integer)`, args: []any{b.cfg.Accounts}},
		// The hand-rolled table has the inbox's shape, so that the two rows
		// differ only in how they use it.
		{sql: `CREATE TABLE ` + seen + ` (
    consumer_name text COLLATE "C" NOT NULL,
    message_id    uuid        NOT NULL,
    processed_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer_name, message_id)
)`},
	}
	for _, q := range stmts {
		if _, err := b.admin.Exec(ctx, q.sql, q.args...); err != nil {
			return fmt.Errorf("setup: %w", err)
		}
	}
	s.update = `UPDATE ` + accounts + ` SET balance = balance + $1 WHERE id = $2`
	// The same effect for many messages: one statement, the amounts of an
	// account summed first (an UPDATE … FROM applies one joined row per
	// target row).
	s.updateBatch = `UPDATE ` + accounts + ` AS a SET balance = a.balance + v.amount
FROM (SELECT id, sum(amount)::bigint AS amount FROM unnest($1::integer[], $2::bigint[]) AS u(id, amount) GROUP BY id) AS v
WHERE a.id = v.id`
	s.checkSelect = `SELECT 1 FROM ` + seen + ` WHERE consumer_name = $1 AND message_id = $2`
	s.checkInsert = `INSERT INTO ` + seen + ` (consumer_name, message_id) VALUES ($1, $2)`

	tables := inboxdriver.Tables{Schema: b.schema}
	client, err := newInbox(ctx, b.admin, b.pool, tables)
	if err != nil {
		return err
	}
	s.client = client
	s.inboxTable = b.table(inboxdriver.DefaultInboxTable)
	s.floorClaim = `INSERT INTO ` + s.inboxTable + ` (consumer_name, message_id, processed_at) VALUES ($1, $2, now())`
	s.floorEnqueue = `INSERT INTO ` + b.table(inboxdriver.DefaultOutboxTable) + ` (id, topic, msg_key, payload, created_at, available_at)
VALUES ($1, $2, $3, $4, $5, $5)`
	s.handler = inboxpgx.PipelineFunc(func(ctx context.Context, msg inbox.Message, b *pgx.Batch) error {
		account, amount, err := decodeEffect(msg.Payload)
		if err != nil {
			return inbox.Permanent(err)
		}
		b.Queue(s.update, amount, account)
		return nil
	})
	s.txHandler = inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
		account, amount, err := decodeEffect(msg.Payload)
		if err != nil {
			return inbox.Permanent(err)
		}
		_, err = tx.Exec(ctx, s.update, amount, account)
		return err
	})
	s.batchHandler = inboxpgx.PipelineBatchFunc(func(ctx context.Context, msgs []inbox.Message, b *pgx.Batch) error {
		ids := make([]int32, len(msgs))
		amounts := make([]int64, len(msgs))
		for i, m := range msgs {
			account, amount, err := decodeEffect(m.Payload)
			if err != nil {
				return inbox.Permanent(err)
			}
			ids[i], amounts[i] = account, amount
		}
		b.Queue(s.updateBatch, ids, amounts)
		return nil
	})
	rows, err := b.admin.Query(ctx, `INSERT INTO `+s.inboxTable+` (consumer_name, message_id)
SELECT $1, gen_random_uuid() FROM generate_series(1, $2::integer) RETURNING message_id::text`, consumer, dupIDs)
	if err != nil {
		return fmt.Errorf("seed duplicate ids: %w", err)
	}
	s.dupIDs, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("seed duplicate ids: %w", err)
	}
	if _, err := b.admin.Exec(ctx, `VACUUM ANALYZE `+accounts); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	if _, err := b.admin.Exec(ctx, `ANALYZE `+s.inboxTable); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	return nil
}

// newInbox migrates the inbox tables named by tables with admin and
// returns a client whose transactions run on pool.
func newInbox(ctx context.Context, admin, pool *pgxpool.Pool, tables inboxdriver.Tables) (*inbox.Client[pgx.Tx], error) {
	ad, err := inboxpgx.New(admin, &inboxpgx.Config{Tables: tables})
	if err != nil {
		return nil, err
	}
	if _, err := inboxmigrate.Up(ctx, ad); err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	d, err := inboxpgx.New(pool, &inboxpgx.Config{Tables: tables})
	if err != nil {
		return nil, err
	}
	return inbox.NewClient(d, nil)
}

// applyBare applies e's effect in a transaction of its own.
func (s *pgStore) applyBare(ctx context.Context, pool *pgxpool.Pool, e *effect) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, s.update, e.amount, e.account); err != nil {
		rollback(ctx, tx)
		return err
	}
	return tx.Commit(ctx)
}

// processBatch processes es in one ProcessBatch, with the batch handler
// when batched is set, and checks that every
// message had outcome want.
func (s *pgStore) processBatch(ctx context.Context, w *worker, es []*effect, want inbox.Outcome, batched bool) error {
	h := s.handler
	if batched {
		h = s.batchHandler
	}
	results, err := s.client.ProcessBatch(ctx, consumer, w.messages(es), h)
	if err != nil {
		return err
	}
	for i, r := range results {
		if r.Err != nil {
			return r.Err
		}
		if r.Outcome != want {
			return fmt.Errorf("message %s: got %v, want %v", es[i].msg.ID, r.Outcome, want)
		}
	}
	return nil
}

// randomSuffix returns 12 random hex digits for the names of the run's
// schema and keys.
func randomSuffix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
