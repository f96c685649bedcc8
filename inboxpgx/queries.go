package inboxpgx

import "github.com/txinbox/inbox/inboxdriver"

// queries holds the driver's statements, rendered once with quoted table
// names. Values are always bind parameters.
type queries struct {
	claim, claimBatch        string
	purge, purgeCount        string
	forget                   string
	stats, tableSize         string
	deadLetter               string
	deadLetters, deadLetter1 string
	deadLetterDelete         string
}

func newQueries(t inboxdriver.Tables) queries {
	pg := inboxdriver.DialectPostgres
	inbox := t.Qualify(pg, t.Inbox)
	dl := t.Qualify(pg, t.DeadLetters)
	idArray := "uuid[]"
	if t.IDType == inboxdriver.IDTypeText {
		idArray = "text[]"
	}
	const dlCols = `id, consumer_name, dedup_key, coalesce(message_id, ''), transport, queue, source_partition,
       source_offset, broker_id, record_key, headers, payload, reason, error_text, attempts, first_seen_at, last_seen_at`
	return queries{
		claim: `INSERT INTO ` + inbox + ` (consumer_name, message_id, processed_at)
VALUES ($1, $2, $3)
ON CONFLICT (consumer_name, message_id) DO NOTHING
RETURNING message_id`,
		claimBatch: `INSERT INTO ` + inbox + ` (consumer_name, message_id, processed_at)
SELECT $1, id, $3 FROM unnest($2::` + idArray + `) AS u(id)
ON CONFLICT (consumer_name, message_id) DO NOTHING
RETURNING message_id::text`,
		// ctid = ANY(ARRAY(…)) bounds the batch and deletes by tuple id.
		purge: `DELETE FROM ` + inbox + ` WHERE ctid = ANY (ARRAY(
    SELECT ctid FROM ` + inbox + `
     WHERE processed_at < $1 AND ($2 = '' OR consumer_name = $2)
     LIMIT $3
       FOR UPDATE SKIP LOCKED))`,
		purgeCount: `SELECT count(*) FROM ` + inbox + ` WHERE processed_at < $1 AND ($2 = '' OR consumer_name = $2)`,
		forget:     `DELETE FROM ` + inbox + ` WHERE consumer_name = $1 AND message_id = $2`,
		stats: `SELECT consumer_name, count(*), min(processed_at), max(processed_at)
  FROM ` + inbox + ` GROUP BY consumer_name ORDER BY consumer_name`,
		tableSize: `SELECT pg_total_relation_size($1::regclass)`,
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
	}
}
