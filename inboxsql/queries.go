package inboxsql

import (
	"strconv"
	"strings"

	"github.com/txinbox/inbox/inboxdriver"
)

// queries holds the driver's statements, rendered once for a dialect with
// quoted table names. Values are always bind parameters, each used once and
// in order, so that one argument list fits every dialect's placeholders.
type queries struct {
	d Dialect
	// inbox and deadLetters are the quoted, qualified table names.
	inbox, deadLetters string

	claim, claimBatch string
	// purge and purgeCount are indexed by whether a consumer filters.
	purge, purgeCount [2]string
	forget            string
	stats, tableSize  string

	deadLetter                 string
	deadLetters1, deadLetters2 string // without and with a consumer filter
	deadLetterGet              string
	deadLetterDelete           string
}

// ph renders the n-th placeholder, counting from 1.
func (q *queries) ph(n int) string {
	if q.d == Postgres {
		return "$" + strconv.Itoa(n)
	}
	return "?"
}

// phs renders placeholders from..from+n-1, separated by commas.
func (q *queries) phs(from, n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(q.ph(from + i))
	}
	return b.String()
}

const deadLetterCols = `consumer_name, dedup_key, message_id, transport, queue, source_partition, source_offset,
    broker_id, record_key, headers, payload, reason, error_text, attempts, first_seen_at, last_seen_at`

func newQueries(d Dialect, t inboxdriver.Tables) *queries {
	sd := d.schema()
	q := &queries{d: d, inbox: t.Qualify(sd, t.Inbox), deadLetters: t.Qualify(sd, t.DeadLetters)}
	inbox, dl := q.inbox, q.deadLetters
	const cols = ` (consumer_name, message_id, processed_at)`

	switch d {
	case Postgres:
		idArray := "uuid[]"
		if t.IDType == inboxdriver.IDTypeText {
			idArray = "text[]"
		}
		q.claim = `INSERT INTO ` + inbox + cols + ` VALUES ($1, $2, $3)
ON CONFLICT (consumer_name, message_id) DO NOTHING
RETURNING message_id::text`
		q.claimBatch = `INSERT INTO ` + inbox + cols + `
SELECT $1, u.id, $3 FROM unnest($2::` + idArray + `) AS u(id)
ON CONFLICT (consumer_name, message_id) DO NOTHING
RETURNING message_id::text`
	case SQLite:
		q.claim = `INSERT INTO ` + inbox + cols + ` VALUES (?1, ?2, ?3)
ON CONFLICT (consumer_name, message_id) DO NOTHING
RETURNING message_id`
		// WHERE true: SQLite needs it to parse ON CONFLICT after a SELECT.
		q.claimBatch = `INSERT INTO ` + inbox + cols + `
SELECT ?1, j.value, ?3 FROM json_each(?2) AS j WHERE true
ON CONFLICT (consumer_name, message_id) DO NOTHING
RETURNING message_id`
	case MariaDB:
		q.claim = `INSERT INTO ` + inbox + cols + ` VALUES (?, ?, ?) RETURNING consumer_name, message_id`
		// claimBatch is rendered per batch size: see claimBatchMariaDB.
	case MySQL:
		q.claim = `INSERT INTO ` + inbox + cols + ` VALUES (?, ?, ?)`
	}

	for i, byConsumer := range []bool{false, true} {
		where := ` WHERE processed_at < ` + q.ph(1)
		n := 2
		if byConsumer {
			where += ` AND consumer_name = ` + q.ph(2)
			n = 3
		}
		q.purgeCount[i] = `SELECT count(*) FROM ` + inbox + where
		switch d {
		case Postgres:
			// ctid = ANY(ARRAY(…)) bounds the batch and deletes by tuple
			// id; SKIP LOCKED passes over rows that in-flight claims hold.
			q.purge[i] = `DELETE FROM ` + inbox + ` WHERE ctid = ANY (ARRAY(
    SELECT ctid FROM ` + inbox + where + ` LIMIT ` + q.ph(n) + ` FOR UPDATE SKIP LOCKED))`
		case SQLite:
			q.purge[i] = `DELETE FROM ` + inbox + ` WHERE (consumer_name, message_id) IN (
    SELECT consumer_name, message_id FROM ` + inbox + where + ` LIMIT ` + q.ph(n) + `)`
		default:
			q.purge[i] = `DELETE FROM ` + inbox + where + ` ORDER BY processed_at LIMIT ` + q.ph(n)
		}
	}
	q.forget = `DELETE FROM ` + inbox + ` WHERE consumer_name = ` + q.ph(1) + ` AND message_id = ` + q.ph(2)
	q.stats = `SELECT consumer_name, count(*), min(processed_at), max(processed_at)
  FROM ` + inbox + ` GROUP BY consumer_name ORDER BY consumer_name`
	switch d {
	case Postgres:
		q.tableSize = `SELECT pg_total_relation_size($1::regclass)`
	case SQLite:
		// dbstat counts the pages of the table and of its indexes.
		q.tableSize = `SELECT coalesce(sum(pgsize), 0) FROM dbstat
 WHERE name IN (SELECT name FROM sqlite_schema WHERE tbl_name = ?)`
	default:
		// InnoDB's own estimate, refreshed with its statistics.
		q.tableSize = `SELECT data_length + index_length FROM information_schema.TABLES
 WHERE table_schema = COALESCE(NULLIF(?, ''), DATABASE()) AND table_name = ?`
	}

	q.deadLetter = `INSERT INTO ` + dl + ` (` + deadLetterCols + `)
VALUES (` + q.phs(1, 16) + `)`
	switch d {
	case Postgres, SQLite:
		q.deadLetter += `
ON CONFLICT (consumer_name, dedup_key) DO UPDATE
   SET reason = excluded.reason, error_text = excluded.error_text,
       attempts = excluded.attempts, last_seen_at = excluded.last_seen_at`
	default:
		q.deadLetter += `
ON DUPLICATE KEY UPDATE reason = VALUES(reason), error_text = VALUES(error_text),
    attempts = VALUES(attempts), last_seen_at = VALUES(last_seen_at)`
	}
	sel := `SELECT id, ` + deadLetterCols + ` FROM ` + dl
	q.deadLetters1 = sel + ` ORDER BY last_seen_at DESC, id DESC LIMIT ` + q.ph(1)
	q.deadLetters2 = sel + ` WHERE consumer_name = ` + q.ph(1) + ` ORDER BY last_seen_at DESC, id DESC LIMIT ` + q.ph(2)
	q.deadLetterGet = sel + ` WHERE id = ` + q.ph(1)
	q.deadLetterDelete = `DELETE FROM ` + dl + ` WHERE id = ` + q.ph(1)
	return q
}

// claimBatchMariaDB renders MariaDB's batch claim of n ids. INSERT IGNORE
// … RETURNING returns exactly the rows it inserted; the caller checks them
// and the ids it did not return.
func (q *queries) claimBatchMariaDB(n int) string {
	var b strings.Builder
	b.WriteString(`INSERT IGNORE INTO ` + q.inbox + ` (consumer_name, message_id, processed_at) VALUES `)
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(?, ?, ?)")
	}
	b.WriteString(` RETURNING consumer_name, message_id`)
	return b.String()
}

// existingMySQL renders a locking read of the rows of n ids of one
// consumer, to check the ids that INSERT IGNORE did not insert.
func (q *queries) existingMySQL(n int) string {
	return `SELECT message_id FROM ` + q.inbox + ` WHERE consumer_name = ? AND message_id IN (` +
		strings.TrimSuffix(strings.Repeat("?, ", n), ", ") + `) LOCK IN SHARE MODE`
}
