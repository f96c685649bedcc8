package inboxpgx

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxtype"
)

var _ inboxdriver.OutboxStore[pgx.Tx] = (*Driver)(nil)

// outboxQueries are the outbox's statements, rendered once.
type outboxQueries struct {
	enqueue, enqueueOrdered, enqueueOne string
	enqueueBare                         string
	claim, claimOrdered                 string
	claimOrderedRuns                    string
	ack, ackKeep, reject, release       string
	stats, list, get                    string
	retry, park, unpark                 string
	purgePublished                      string
}

// outboxCols are the columns scanRow reads, in order.
const outboxCols = `id::text, topic, msg_key, coalesce(key_seq, 0), headers, payload, coalesce(causation_id, ''),
       created_at, available_at, attempts, coalesce(last_error, ''), claim_token IS NOT NULL, published_at, parked_at`

func newOutboxQueries(t inboxdriver.Tables) outboxQueries {
	pg := inboxdriver.DialectPostgres
	ob := t.Qualify(pg, t.Outbox)
	idArray := "uuid[]"
	if t.IDType == inboxdriver.IDTypeText {
		idArray = "text[]"
	}
	var q outboxQueries
	q.enqueueQueries(ob, t.Qualify(pg, t.OutboxKeys), idArray)
	q.claimQueries(ob)
	q.writeBackQueries(ob, idArray)
	q.adminQueries(ob)
	return q
}

// enqueueQueries renders the enqueues into the outbox table ob, whose
// ordered mode numbers each key's rows in the table keys.
func (q *outboxQueries) enqueueQueries(ob, keys, idArray string) {
	const insertCols = ` (id, topic, msg_key, key_seq, headers, payload, causation_id, created_at, available_at)`
	unnest := `unnest($1::` + idArray + `, $2::text[], $3::bytea[], $4::text[], $5::bytea[], $6::text[])`
	// One event, the commonest enqueue, as plain VALUES: cheaper for
	// the server than unnest over one-element arrays.
	q.enqueueOne = `INSERT INTO ` + ob + insertCols + `
VALUES ($1, $2, $3, NULL, $4::jsonb, $5, NULLIF($6, ''), $7, $7)`
	// One event with no headers and no causation: the columns left
	// out take their defaults.
	q.enqueueBare = `INSERT INTO ` + ob + ` (id, topic, msg_key, payload, created_at, available_at)
VALUES ($1, $2, $3, $4, $5, $5)`
	q.enqueue = `INSERT INTO ` + ob + insertCols + `
SELECT u.id, u.topic, u.k, NULL, u.h::jsonb, u.p, NULLIF(u.c, ''), $7, $7
  FROM ` + unnest + ` AS u(id, topic, k, h, p, c)`
	// Ordered: one upsert takes each key's sequence numbers for the
	// whole enqueue, in key order (so two enqueues lock keys in the
	// same order), and its row lock holds the next producer of the key
	// until this transaction ends. The rows of a key are numbered in
	// the order of the enqueue.
	q.enqueueOrdered = `WITH m AS (
    SELECT * FROM ` + unnest + ` WITH ORDINALITY AS u(id, topic, k, h, p, c, n)
), ks AS (
    INSERT INTO ` + keys + ` AS ks (msg_key, last_seq)
    SELECT k, count(*) FROM m WHERE k IS NOT NULL GROUP BY k ORDER BY k
    ON CONFLICT (msg_key) DO UPDATE SET last_seq = ks.last_seq + EXCLUDED.last_seq
    RETURNING msg_key, last_seq
)
INSERT INTO ` + ob + insertCols + `
SELECT m.id, m.topic, m.k,
       CASE WHEN m.k IS NULL THEN NULL ELSE ks.last_seq - count(*) OVER w + row_number() OVER w END,
       m.h::jsonb, m.p, NULLIF(m.c, ''), $7, $7
  FROM m LEFT JOIN ks ON ks.msg_key = m.k
WINDOW w AS (PARTITION BY m.k ORDER BY m.n ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)`
}

// claimQueries renders the claims of the outbox table ob: of unordered
// rows, of ordered rows, and of ordered rows in whole runs.
func (q *outboxQueries) claimQueries(ob string) {
	// oCols are outboxCols for a statement where the table is aliased o.
	const oCols = `o.id::text, o.topic, o.msg_key, coalesce(o.key_seq, 0), o.headers, o.payload, coalesce(o.causation_id, ''),
       o.created_at, o.available_at, o.attempts, coalesce(o.last_error, ''), o.claim_token IS NOT NULL, o.published_at, o.parked_at`
	keyWalk := outboxKeyWalk(ob)
	// lockHead locks the walked row walk.id if it is still a ready head.
	lockHead := `
        SELECT h.msg_key, h.key_seq FROM ` + ob + ` AS h
         WHERE h.id = walk.id AND h.published_at IS NULL AND h.parked_at IS NULL AND h.available_at <= $1
           FOR UPDATE SKIP LOCKED`
	// readyRun is the ready run of the key heads.msg_key from its head:
	// at most $2 rows, numbered rn from 1 in sequence order.
	readyRun := `
        SELECT x.id, x.rn FROM (
            SELECT s.id, row_number() OVER (ORDER BY s.key_seq) AS rn,
                   bool_and(s.parked_at IS NULL AND s.available_at <= $1) OVER (ORDER BY s.key_seq) AS ready
              FROM ` + ob + ` AS s
             WHERE s.msg_key = heads.msg_key AND s.key_seq >= heads.key_seq AND s.published_at IS NULL
             ORDER BY s.key_seq LIMIT $2
        ) AS x WHERE x.ready`
	q.claim = `WITH c AS (
    SELECT id FROM ` + ob + `
     WHERE published_at IS NULL AND parked_at IS NULL AND key_seq IS NULL AND available_at <= $1
     ORDER BY available_at LIMIT $2
       FOR UPDATE SKIP LOCKED
)
UPDATE ` + ob + ` AS o SET claim_token = $3, available_at = $4 FROM c WHERE o.id = c.id
RETURNING ` + oCols
	// Ordered: the heads are each key's first pending row, found by a
	// skip scan of the pending ordered rows' index on (msg_key,
	// key_seq): one index descent per key that has pending rows, from
	// the key after $5 (the driver's OutboxKeyCursor) on, then wrapping
	// round to the first; the walk stops once $2 ready heads are
	// locked. Behind each head, the run of its key's next rows up to
	// the first that is parked or not ready. No other claim can take a
	// run's rows while its head stands, so only the heads are locked.
	// The runs are cut to the limit by position, which keeps a prefix
	// of each key.
	q.claimOrdered = keyWalk + `, heads AS (
    SELECT hd.msg_key, hd.key_seq FROM walk CROSS JOIN LATERAL (` + lockHead + `) AS hd
     LIMIT $2
), run AS (
    SELECT r.id FROM heads CROSS JOIN LATERAL (` + readyRun + `) AS r
    ORDER BY r.rn LIMIT $2
)
UPDATE ` + ob + ` AS o SET claim_token = $3, available_at = $4 FROM run WHERE o.id = run.id
RETURNING ` + oCols
	// Ordered, whole runs (OutboxClaimParams.WholeRuns): the same walk
	// of the keys, but each head is locked only when the rows before
	// it left room: the LIMIT of taken stops the nested loop over the
	// walk once the runs of the keys locked so far hold $2 rows, so
	// the keys after them stay free for other claims. An ORDER BY
	// there would read, and lock, every key first; the order the
	// rows come in decides only which are taken, and run keeps of
	// each key the rows whose place among those taken is their place
	// in the run: a prefix, whatever the plan.
	q.claimOrderedRuns = keyWalk + `, heads AS (
    SELECT hd.msg_key, hd.key_seq FROM walk CROSS JOIN LATERAL (` + lockHead + `) AS hd
), taken AS (
    SELECT heads.msg_key, r.id, r.rn FROM heads CROSS JOIN LATERAL (` + readyRun + `) AS r
     LIMIT $2
), run AS (
    SELECT t.id FROM (
        SELECT taken.id, taken.rn, row_number() OVER (PARTITION BY taken.msg_key ORDER BY taken.rn) AS pos FROM taken
    ) AS t WHERE t.pos = t.rn
)
UPDATE ` + ob + ` AS o SET claim_token = $3, available_at = $4 FROM run WHERE o.id = run.id
RETURNING ` + oCols
}

// outboxKeyWalk walks the keys of the outbox table ob that have pending
// ordered rows, as the ordered claims describe, yielding each key's first
// pending row.
func outboxKeyWalk(ob string) string {
	return `WITH RECURSIVE after AS (
    (SELECT p.msg_key, p.key_seq, p.id FROM ` + ob + ` AS p
      WHERE p.published_at IS NULL AND p.key_seq IS NOT NULL AND p.msg_key > $5
      ORDER BY p.msg_key, p.key_seq LIMIT 1)
    UNION ALL
    SELECT n.msg_key, n.key_seq, n.id FROM after CROSS JOIN LATERAL (
        SELECT p.msg_key, p.key_seq, p.id FROM ` + ob + ` AS p
         WHERE p.published_at IS NULL AND p.key_seq IS NOT NULL AND p.msg_key > after.msg_key
         ORDER BY p.msg_key, p.key_seq LIMIT 1) AS n
), wrapped AS (
    (SELECT p.msg_key, p.key_seq, p.id FROM ` + ob + ` AS p
      WHERE p.published_at IS NULL AND p.key_seq IS NOT NULL AND p.msg_key <= $5
      ORDER BY p.msg_key, p.key_seq LIMIT 1)
    UNION ALL
    SELECT n.msg_key, n.key_seq, n.id FROM wrapped CROSS JOIN LATERAL (
        SELECT p.msg_key, p.key_seq, p.id FROM ` + ob + ` AS p
         WHERE p.published_at IS NULL AND p.key_seq IS NOT NULL AND p.msg_key > wrapped.msg_key AND p.msg_key <= $5
         ORDER BY p.msg_key, p.key_seq LIMIT 1) AS n
), walk AS (
    SELECT id FROM after UNION ALL SELECT id FROM wrapped
)`
}

// writeBackQueries renders a relay's write-backs of its claimed rows to
// the outbox table ob.
func (q *outboxQueries) writeBackQueries(ob, idArray string) {
	q.ack = `DELETE FROM ` + ob + ` WHERE id = ANY($1::` + idArray + `) AND claim_token = $2`
	q.ackKeep = `UPDATE ` + ob + ` SET published_at = $3, claim_token = NULL WHERE id = ANY($1::` + idArray + `) AND claim_token = $2`
	q.reject = `UPDATE ` + ob + `
   SET attempts = attempts + 1, last_error = $3, claim_token = NULL, available_at = $4,
       parked_at = CASE WHEN $5 THEN $6::timestamptz END
 WHERE id = $1 AND claim_token = $2`
	q.release = `UPDATE ` + ob + ` SET claim_token = NULL, available_at = $3 WHERE id = ANY($1::` + idArray + `) AND claim_token = $2`
}

// adminQueries renders the operator's statements on the outbox table ob.
func (q *outboxQueries) adminQueries(ob string) {
	q.stats = `SELECT count(*) FILTER (WHERE published_at IS NULL AND parked_at IS NULL),
       count(*) FILTER (WHERE published_at IS NULL AND parked_at IS NOT NULL),
       count(*) FILTER (WHERE published_at IS NOT NULL),
       min(created_at) FILTER (WHERE published_at IS NULL AND parked_at IS NULL)
  FROM ` + ob
	q.list = `SELECT ` + outboxCols + ` FROM ` + ob + `
 WHERE $1 = ''
    OR ($1 = 'pending' AND published_at IS NULL AND parked_at IS NULL)
    OR ($1 = 'parked' AND published_at IS NULL AND parked_at IS NOT NULL)
    OR ($1 = 'published' AND published_at IS NOT NULL)
 ORDER BY created_at, id LIMIT $2`
	q.get = `SELECT ` + outboxCols + ` FROM ` + ob + ` WHERE id = $1`
	q.retry = `UPDATE ` + ob + ` SET available_at = $2 WHERE id = $1 AND published_at IS NULL AND parked_at IS NULL`
	q.park = `UPDATE ` + ob + ` SET parked_at = $2, claim_token = NULL WHERE id = $1 AND published_at IS NULL AND parked_at IS NULL`
	q.unpark = `UPDATE ` + ob + ` SET parked_at = NULL, attempts = 0, available_at = $2 WHERE id = $1 AND published_at IS NULL AND parked_at IS NOT NULL`
	q.purgePublished = `DELETE FROM ` + ob + ` WHERE ctid = ANY (ARRAY(
    SELECT ctid FROM ` + ob + ` WHERE published_at < $1 LIMIT $2 FOR UPDATE SKIP LOCKED))`
}

// OutboxBegin implements inboxdriver.OutboxStore.
func (d *Driver) OutboxBegin(ctx context.Context) (pgx.Tx, error) {
	return d.pool.BeginTx(ctx, d.txOptions)
}

// OutboxEnqueue implements inboxdriver.OutboxStore with one INSERT over
// unnest, whatever the number of rows.
func (d *Driver) OutboxEnqueue(ctx context.Context, tx pgx.Tx, p *inboxdriver.OutboxEnqueueParams) error {
	q, args, err := d.enqueueStatement(p)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, q, args...)
	return err
}

var _ inboxdriver.OutboxQueuer = (*Driver)(nil)

// OutboxQueue implements inboxdriver.OutboxQueuer: batch is a *pgx.Batch,
// which gets the INSERT of OutboxEnqueue.
func (d *Driver) OutboxQueue(batch any, p *inboxdriver.OutboxEnqueueParams) error {
	b, ok := batch.(*pgx.Batch)
	if !ok || b == nil {
		return fmt.Errorf("inboxpgx: the batch to queue an enqueue on is a %T, not a *pgx.Batch", batch)
	}
	q, args, err := d.enqueueStatement(p)
	if err != nil {
		return err
	}
	b.Queue(q, args...)
	return nil
}

// enqueueStatement is the INSERT that writes p.Rows, and its arguments.
func (d *Driver) enqueueStatement(p *inboxdriver.OutboxEnqueueParams) (string, []any, error) {
	n := len(p.Rows)
	if n == 1 && !p.Ordered {
		r := p.Rows[0]
		if len(r.Headers) == 0 && r.CausationID == "" {
			return d.oq.enqueueBare, []any{d.idArg(r.ID), r.Topic, r.Key, r.Payload, r.CreatedAt}, nil
		}
		h, err := encodeHeaders(r.Headers)
		if err != nil {
			return "", nil, err
		}
		return d.oq.enqueueOne, []any{d.idArg(r.ID), r.Topic, r.Key, h, r.Payload, r.CausationID, r.CreatedAt}, nil
	}
	ids, topics, headers, causes := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	keys, payloads := make([][]byte, n), make([][]byte, n)
	for i, r := range p.Rows {
		ids[i], topics[i], keys[i], payloads[i], causes[i] = r.ID, r.Topic, r.Key, r.Payload, r.CausationID
		h, err := encodeHeaders(r.Headers)
		if err != nil {
			return "", nil, err
		}
		headers[i] = h
	}
	q := d.oq.enqueue
	if p.Ordered {
		q = d.oq.enqueueOrdered
	}
	var created time.Time
	if n > 0 {
		created = p.Rows[0].CreatedAt
	}
	return q, []any{d.idsArg(ids), topics, keys, headers, payloads, causes, created}, nil
}

// OutboxClaim implements inboxdriver.OutboxAdmin: the ordered and the
// unordered claims go in one round trip. Each takes at most p.Limit rows.
func (d *Driver) OutboxClaim(ctx context.Context, p *inboxdriver.OutboxClaimParams) ([]*inboxdriver.OutboxRow, error) {
	b := &pgx.Batch{}
	out := d.queueClaims(b, p)
	if err := d.pool.SendBatch(ctx, b).Close(); err != nil {
		return nil, err
	}
	inboxdriver.SortOutboxRows(*out)
	return *out, nil
}

var _ inboxdriver.OutboxAckClaimer = (*Driver)(nil)

// OutboxAckClaim implements inboxdriver.OutboxAckClaimer: the write-back
// and the claims go in one round trip.
func (d *Driver) OutboxAckClaim(ctx context.Context, a *inboxdriver.OutboxAckParams, p *inboxdriver.OutboxClaimParams) (int64, []*inboxdriver.OutboxRow, error) {
	b := &pgx.Batch{}
	var acked int64
	count := func(ct pgconn.CommandTag) error {
		acked = ct.RowsAffected()
		return nil
	}
	if a.Keep {
		b.Queue(d.oq.ackKeep, d.idsArg(a.IDs), a.Token, a.Now).Exec(count)
	} else {
		b.Queue(d.oq.ack, d.idsArg(a.IDs), a.Token).Exec(count)
	}
	out := d.queueClaims(b, p)
	if err := d.pool.SendBatch(ctx, b).Close(); err != nil {
		return 0, nil, err
	}
	inboxdriver.SortOutboxRows(*out)
	return acked, *out, nil
}

// queueClaims queues the ordered and the unordered claims of p on b; the
// rows are in *out once b was sent.
func (d *Driver) queueClaims(b *pgx.Batch, p *inboxdriver.OutboxClaimParams) *[]*inboxdriver.OutboxRow {
	out := new([]*inboxdriver.OutboxRow)
	from := d.keys.Key()
	ordered := d.oq.claimOrdered
	if p.WholeRuns {
		ordered = d.oq.claimOrderedRuns
	}
	b.Queue(ordered, p.Now, p.Limit, p.Token, p.LeaseUntil, from).Query(func(rows pgx.Rows) error {
		rs, err := pgx.CollectRows(rows, scanOutboxRow)
		d.keys.Advance(from, rs)
		*out = append(*out, rs...)
		return err
	})
	b.Queue(d.oq.claim, p.Now, p.Limit, p.Token, p.LeaseUntil).Query(func(rows pgx.Rows) error {
		rs, err := pgx.CollectRows(rows, scanOutboxRow)
		*out = append(*out, rs...)
		return err
	})
	return out
}

// OutboxAck implements inboxdriver.OutboxAdmin.
func (d *Driver) OutboxAck(ctx context.Context, p *inboxdriver.OutboxAckParams) (int64, error) {
	if p.Keep {
		ct, err := d.pool.Exec(ctx, d.oq.ackKeep, d.idsArg(p.IDs), p.Token, p.Now)
		return ct.RowsAffected(), err
	}
	ct, err := d.pool.Exec(ctx, d.oq.ack, d.idsArg(p.IDs), p.Token)
	return ct.RowsAffected(), err
}

// OutboxReject implements inboxdriver.OutboxAdmin.
func (d *Driver) OutboxReject(ctx context.Context, p *inboxdriver.OutboxRejectParams) (bool, error) {
	ct, err := d.pool.Exec(ctx, d.oq.reject, p.ID, p.Token, p.Error, p.AvailableAt, p.Park, p.Now)
	return ct.RowsAffected() == 1, err
}

// OutboxRelease implements inboxdriver.OutboxAdmin.
func (d *Driver) OutboxRelease(ctx context.Context, p *inboxdriver.OutboxReleaseParams) (int64, error) {
	ct, err := d.pool.Exec(ctx, d.oq.release, d.idsArg(p.IDs), p.Token, p.AvailableAt)
	return ct.RowsAffected(), err
}

// OutboxStats implements inboxdriver.OutboxAdmin.
func (d *Driver) OutboxStats(ctx context.Context) (*inboxtype.OutboxStats, error) {
	s := &inboxtype.OutboxStats{}
	var oldest *time.Time
	if err := d.pool.QueryRow(ctx, d.oq.stats).Scan(&s.Pending, &s.Parked, &s.Published, &oldest); err != nil {
		return nil, err
	}
	if oldest != nil {
		s.OldestPending = oldest.UTC()
	}
	return s, nil
}

// OutboxList implements inboxdriver.OutboxAdmin.
func (d *Driver) OutboxList(ctx context.Context, p *inboxdriver.OutboxListParams) ([]*inboxdriver.OutboxRow, error) {
	rows, err := d.pool.Query(ctx, d.oq.list, string(p.State), p.Limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanOutboxRow)
}

// OutboxGet implements inboxdriver.OutboxAdmin.
func (d *Driver) OutboxGet(ctx context.Context, id string) (*inboxdriver.OutboxRow, error) {
	rows, err := d.pool.Query(ctx, d.oq.get, id)
	if err != nil {
		return nil, err
	}
	r, err := pgx.CollectExactlyOneRow(rows, scanOutboxRow)
	if err == pgx.ErrNoRows {
		return nil, inboxdriver.ErrNotFound
	}
	return r, err
}

// OutboxSet implements inboxdriver.OutboxAdmin.
func (d *Driver) OutboxSet(ctx context.Context, p *inboxdriver.OutboxSetParams) (bool, error) {
	var q string
	switch p.Action {
	case inboxdriver.OutboxRetryNow:
		q = d.oq.retry
	case inboxdriver.OutboxParkRow:
		q = d.oq.park
	case inboxdriver.OutboxUnpark:
		q = d.oq.unpark
	default:
		return false, inboxdriver.UnknownOutboxAction(p.Action)
	}
	ct, err := d.pool.Exec(ctx, q, p.ID, p.Now)
	return ct.RowsAffected() == 1, err
}

// OutboxPurgePublished implements inboxdriver.OutboxAdmin.
func (d *Driver) OutboxPurgePublished(ctx context.Context, p *inboxdriver.OutboxPurgeParams) (int64, error) {
	ct, err := d.pool.Exec(ctx, d.oq.purgePublished, p.Before, p.Limit)
	return ct.RowsAffected(), err
}

func scanOutboxRow(rows pgx.CollectableRow) (*inboxdriver.OutboxRow, error) {
	r := &inboxdriver.OutboxRow{}
	var published, parked *time.Time
	err := rows.Scan(&r.ID, &r.Topic, &r.Key, &r.KeySeq, &r.Headers, &r.Payload, &r.CausationID,
		&r.CreatedAt, &r.AvailableAt, &r.Attempts, &r.LastError, &r.Claimed, &published, &parked)
	if err != nil {
		return nil, err
	}
	r.CreatedAt, r.AvailableAt = r.CreatedAt.UTC(), r.AvailableAt.UTC()
	if published != nil {
		r.PublishedAt = published.UTC()
	}
	if parked != nil {
		r.ParkedAt = parked.UTC()
	}
	return r, nil
}

// encodeHeaders is the stored form of a message's headers: a JSON object.
func encodeHeaders(h map[string]string) (string, error) {
	if len(h) == 0 {
		return "{}", nil
	}
	b, err := json.Marshal(h)
	return string(b), err
}
