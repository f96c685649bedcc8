package inboxpgx

import "github.com/txinbox/inbox/inboxdriver"

// queries holds the driver's statements, rendered once with quoted table
// names. Values are always bind parameters.
type queries struct {
	claim, claimBatch string
	// claimBounded and claimBatchBounded are the claims with their lock
	// wait bounded: see boundedClaim.
	claimBounded, claimBatchBounded string
	purge, purgeCount               string
	forget                          string
	stats, tableSize                string
	deadLetter                      string
	deadLetters, deadLetter1        string
	deadLetterDelete                string
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
		claimBounded: boundedClaim(`INSERT INTO `+inbox+` (consumer_name, message_id, processed_at)
    SELECT $1, $2, $3 FROM bound WHERE bound.lt IS NOT NULL
    ON CONFLICT (consumer_name, message_id) DO NOTHING
    RETURNING message_id`, `count(*)`),
		claimBatchBounded: boundedClaim(`INSERT INTO `+inbox+` (consumer_name, message_id, processed_at)
    SELECT $1, u.id, $3 FROM bound, unnest($2::`+idArray+`) AS u(id) WHERE bound.lt IS NOT NULL
    ON CONFLICT (consumer_name, message_id) DO NOTHING
    RETURNING message_id::text`, `array_agg(message_id)`),
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

// boundedClaim wraps a claim so that lock_timeout ($4) bounds its wait
// behind an in-flight duplicate, and only its wait, in one statement:
//
//  1. the CTE bound saves the transaction's lock_timeout in a
//     transaction-local custom setting and sets the bound (the nesting makes
//     the save come first);
//  2. the claim reads its row(s) from bound, so the bound is set before its
//     first insert, and it waits, if at all, under it;
//  3. the outer SELECT aggregates every claimed row, so the claim has run to
//     completion before the outer projection restores the saved
//     lock_timeout, exactly, even inside a caller's transaction that set its
//     own.
//
// Before this was one statement it was three (set, claim, restore), and the
// two extra statements cost about a tenth of the throughput of a
// one-message transaction: see docs/BENCHMARKS.md. The result is one row:
// agg over the claimed message_ids, and the restored setting.
func boundedClaim(claim, agg string) string {
	return `WITH bound AS (
    SELECT set_config('lock_timeout',
        $4::text || left(set_config('inbox.saved_lock_timeout', current_setting('lock_timeout'), true), 0),
        true) AS lt),
claimed AS (
    ` + claim + `)
SELECT c.agg, set_config('lock_timeout', current_setting('inbox.saved_lock_timeout'), true)
  FROM (SELECT ` + agg + ` AS agg FROM claimed) AS c, bound`
}
