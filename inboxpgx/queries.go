package inboxpgx

import "github.com/txinbox/inbox/inboxdriver"

// queries holds the driver's statements, rendered once with quoted table
// names. Values are always bind parameters.
type queries struct {
	claim, claimBatch        string
	claimPlain, applied      string
	claimBatchPlain          string
	purge, purgeCount        string
	forget, forgetCount      string
	stats, tableSize         string
	deadLetter               string
	deadLetters, deadLetter1 string
	deadLetterDelete         string
	// The replay requests' statements (inboxdriver.ReplayStore).
	deadLetterMarkOne, deadLetterMarkAll   string
	deadLetterCountOne, deadLetterCountAll string // what a mark would mark
	deadLettersMarked, deadLetterUnmark    string

	effectInsert, effectLock, effectRestart string
	effectDone, effectFailed, effectResolve string
	effectList                              string
}

func newQueries(t inboxdriver.Tables) queries {
	pg := inboxdriver.DialectPostgres
	inbox := t.Qualify(pg, t.Inbox)
	dl := t.Qualify(pg, t.DeadLetters)
	effects := t.Qualify(pg, t.Effects)
	idType, idArray := "uuid", "uuid[]"
	if t.IDType == inboxdriver.IDTypeText {
		idType, idArray = "text", "text[]"
	}
	const effectKey = `consumer_name = $1 AND message_id = $2 AND step = $3`
	const effectCols = `consumer_name, message_id::text, step, state, result, attempts, started_at, done_at`
	const dlCols = `id, consumer_name, dedup_key, coalesce(message_id, ''), transport, queue, source_partition,
       source_offset, broker_id, record_key, headers, payload, reason, error_text, attempts, first_seen_at, last_seen_at`
	q := queries{
		// processed_at is the database's clock, which the purge cutoff
		// reads too.
		claim: `INSERT INTO ` + inbox + ` (consumer_name, message_id, processed_at)
VALUES ($1, $2, now())
ON CONFLICT (consumer_name, message_id) DO NOTHING`,
		// The pipelined claim: a duplicate fails it, which stops the
		// pipeline before the handler's work.
		claimPlain: `INSERT INTO ` + inbox + ` (consumer_name, message_id, processed_at) VALUES ($1, $2, now())`,
		applied:    `SELECT EXISTS (SELECT FROM ` + inbox + ` WHERE consumer_name = $1 AND message_id = $2)`,
		claimBatchPlain: `INSERT INTO ` + inbox + ` (consumer_name, message_id, processed_at)
SELECT $1, id, now() FROM unnest($2::` + idArray + `) AS u(id)`,
		claimBatch: `INSERT INTO ` + inbox + ` (consumer_name, message_id, processed_at)
SELECT $1, id, now() FROM unnest($2::` + idArray + `) AS u(id)
ON CONFLICT (consumer_name, message_id) DO NOTHING
RETURNING message_id::text`,
		// ctid = ANY(ARRAY(…)) bounds the batch and deletes by tuple id.
		// ONLY keeps it to this one table: a ctid names a row within one
		// table, and should the name come to be a partitioned inbox's (a
		// process still configured for the plain table after an
		// adoption) the same ctids would match other days' rows, which
		// must stay; ONLY finds no rows in a partitioned parent, so such a
		// purge deletes nothing. The effect-ledger entries of the purged
		// messages go in the same statement.
		purge: `WITH purged AS (
    DELETE FROM ONLY ` + inbox + ` WHERE ctid = ANY (ARRAY(
        SELECT ctid FROM ONLY ` + inbox + `
         WHERE processed_at < now() - $1::bigint * interval '1 microsecond'
           AND ($2 = '' OR consumer_name = $2)
         LIMIT $3
           FOR UPDATE SKIP LOCKED))
    RETURNING consumer_name, message_id
), effects AS (
    DELETE FROM ` + effects + ` AS e USING purged AS p
     WHERE e.consumer_name = p.consumer_name AND e.message_id = p.message_id
)
SELECT count(*) FROM purged`,
		purgeCount: `SELECT count(*) FROM ` + inbox + `
 WHERE processed_at < now() - $1::bigint * interval '1 microsecond' AND ($2 = '' OR consumer_name = $2)`,
		forget: `WITH effects AS (
    DELETE FROM ` + effects + ` WHERE consumer_name = $1 AND message_id = $2 RETURNING 1
), forgotten AS (
    DELETE FROM ` + inbox + ` WHERE consumer_name = $1 AND message_id = $2 RETURNING 1
)
SELECT (SELECT count(*) FROM forgotten) + (SELECT count(*) FROM effects)`,
		forgetCount: `SELECT (SELECT count(*) FROM ` + inbox + ` WHERE consumer_name = $1 AND message_id = $2),
       (SELECT count(*) FROM ` + effects + ` WHERE consumer_name = $1 AND message_id = $2)`,
		stats: `SELECT consumer_name, count(*), min(processed_at), max(processed_at)
  FROM ` + inbox + ` GROUP BY consumer_name ORDER BY consumer_name`,
		// The sum over the partitions of a partitioned table, which has
		// no storage of its own; pg_partition_tree lists no other table.
		tableSize: `SELECT coalesce(sum(pg_total_relation_size(relid)), pg_total_relation_size($1::regclass)) FROM pg_partition_tree($1::regclass)`,
		deadLetter: `INSERT INTO ` + dl + ` AS d (consumer_name, dedup_key, message_id, transport, queue,
    source_partition, source_offset, broker_id, record_key, headers, payload, reason, error_text,
    attempts, first_seen_at, last_seen_at)
VALUES ($1, $2, NULLIF($3, ''), $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $15)
ON CONFLICT (consumer_name, dedup_key) DO UPDATE
   SET reason = excluded.reason, error_text = excluded.error_text,
       attempts = excluded.attempts, last_seen_at = excluded.last_seen_at`,
		deadLetters: `SELECT ` + dlCols + ` FROM ` + dl + `
 WHERE ($1 = '' OR consumer_name = $1) ORDER BY last_seen_at DESC, id DESC LIMIT $2`,
		deadLetter1:      `SELECT ` + dlCols + ` FROM ` + dl + ` WHERE id = $1`,
		deadLetterDelete: `DELETE FROM ` + dl + ` WHERE id = $1`,
		deadLetterMarkOne: `UPDATE ` + dl + ` SET replay_requested_at = $1
 WHERE id = $2 AND message_id IS NOT NULL AND replay_requested_at IS NULL`,
		deadLetterMarkAll: `UPDATE ` + dl + ` SET replay_requested_at = $1
 WHERE consumer_name = $2 AND message_id IS NOT NULL AND replay_requested_at IS NULL`,
		deadLetterCountOne: `SELECT count(*) FROM ` + dl + `
 WHERE id = $1 AND message_id IS NOT NULL AND replay_requested_at IS NULL`,
		deadLetterCountAll: `SELECT count(*) FROM ` + dl + `
 WHERE consumer_name = $1 AND message_id IS NOT NULL AND replay_requested_at IS NULL`,
		deadLettersMarked: `SELECT ` + dlCols + ` FROM ` + dl + `
 WHERE consumer_name = $1 AND replay_requested_at IS NOT NULL ORDER BY replay_requested_at, id LIMIT $2`,
		deadLetterUnmark: `UPDATE ` + dl + ` SET replay_requested_at = NULL WHERE id = $1 AND replay_requested_at IS NOT NULL`,

		effectInsert: `INSERT INTO ` + effects + ` (consumer_name, message_id, step, state, attempts, started_at)
VALUES ($1, $2, $3, 'started', 1, $4)
ON CONFLICT (consumer_name, message_id, step) DO NOTHING`,
		effectLock:    `SELECT ` + effectCols + ` FROM ` + effects + ` WHERE ` + effectKey + ` FOR UPDATE`,
		effectRestart: `UPDATE ` + effects + ` SET state = 'started', attempts = attempts + 1, started_at = $4 WHERE ` + effectKey + ` RETURNING attempts`,
		effectDone:    `UPDATE ` + effects + ` SET state = 'done', result = $4, done_at = $5 WHERE ` + effectKey + ` AND state = 'started'`,
		effectFailed:  `UPDATE ` + effects + ` SET state = 'failed' WHERE ` + effectKey + ` AND state = 'started'`,
		effectResolve: `UPDATE ` + effects + `
   SET state = $4,
       result = CASE WHEN $4 = 'done' THEN $5::bytea END,
       done_at = CASE WHEN $4 = 'done' THEN $6::timestamptz END
 WHERE ` + effectKey + ` AND state = 'started'`,
		effectList: `SELECT ` + effectCols + ` FROM ` + effects + `
 WHERE ($1 = '' OR consumer_name = $1)
   AND ($2::text IS NULL OR message_id = CAST($2::text AS ` + idType + `))
   AND ($3 = '' OR state = $3)
   AND ($4::timestamptz IS NULL OR started_at < $4)
 ORDER BY started_at, consumer_name, message_id, step
 LIMIT $5`,
	}
	if t.Layout == inboxdriver.LayoutPartitioned {
		q.purge = purgeByKey(inbox, effects)
	}
	return q
}
