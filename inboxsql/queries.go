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
	// inbox, deadLetters and effects are the quoted, qualified table names.
	inbox, deadLetters, effects string

	claim, claimBatch string
	// The purge statements are indexed by whether a consumer filters.
	// purge deletes a batch: on Postgres with its ledger entries, returning
	// the count; on SQLite returning the keys, whose ledger entries the
	// same transaction then deletes. purgeSelect picks a batch, on MySQL
	// (locking it) and on SQLite with the ledger in another file.
	purge, purgeSelect, purgeCount [2]string
	// forget deletes one message's inbox row: on Postgres with its ledger
	// entries, returning the count; elsewhere effectForget deletes those.
	forget           string
	stats, tableSize string
	// forgetCount counts what a forget deletes: [0] the inbox row, [1]
	// the ledger entries, each in its own database (Config.EffectsDB).
	forgetCount [2]string

	// The ledger's statements. Their parameters come in the order of the
	// statement: the values set, then the key.
	effectInsert, effectGet, effectRestart  string
	effectDone, effectFailed, effectResolve string
	effectForget                            string

	deadLetter                 string
	deadLetters1, deadLetters2 string // without and with a consumer filter
	deadLetterGet              string
	deadLetterDelete           string
	// The replay requests' statements (inboxdriver.ReplayStore).
	deadLetterMarkOne, deadLetterMarkAll   string
	deadLetterCountOne, deadLetterCountAll string // what a mark would mark
	deadLettersMarked, deadLetterUnmark    string
}

// now renders the database's clock in the type of the processed_at column:
// timestamptz on Postgres, Unix microseconds on SQLite, a DATETIME(6) in UTC
// on MySQL. Claims stamp processed_at with it, and the purge cutoff is read
// from it, never from a consumer host's clock.
func (q *queries) now() string {
	switch q.d {
	case Postgres:
		return `now()`
	case SQLite:
		return `CAST(unixepoch('subsec') * 1000000 AS INTEGER)`
	default:
		return `UTC_TIMESTAMP(6)`
	}
}

// cutoff renders the purge cutoff: the database's clock minus the number
// of microseconds that placeholder ph binds.
func (q *queries) cutoff(ph string) string {
	switch q.d {
	case Postgres:
		return `now() - ` + ph + `::bigint * interval '1 microsecond'`
	case SQLite:
		return `(` + q.now() + ` - ` + ph + `)`
	default:
		return `UTC_TIMESTAMP(6) - INTERVAL ` + ph + ` MICROSECOND`
	}
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
	q := &queries{d: d, inbox: t.Qualify(sd, t.Inbox), deadLetters: t.Qualify(sd, t.DeadLetters), effects: t.Qualify(sd, t.Effects)}
	q.claimQueries(t.IDType)
	q.purgeQueries(t.Layout)
	q.forgetQueries()
	q.effectQueries(q.effects)
	q.statsQueries()
	q.deadLetterQueries()
	return q
}

// claimQueries renders the claims of one message and of a batch.
func (q *queries) claimQueries(idType inboxdriver.IDType) {
	inbox := q.inbox
	const cols = ` (consumer_name, message_id, processed_at)`
	switch q.d {
	case Postgres:
		idArray := "uuid[]"
		if idType == inboxdriver.IDTypeText {
			idArray = "text[]"
		}
		q.claim = `INSERT INTO ` + inbox + cols + ` VALUES ($1, $2, now())
ON CONFLICT (consumer_name, message_id) DO NOTHING
RETURNING message_id::text`
		q.claimBatch = `INSERT INTO ` + inbox + cols + `
SELECT $1, u.id, now() FROM unnest($2::` + idArray + `) AS u(id)
ON CONFLICT (consumer_name, message_id) DO NOTHING
RETURNING message_id::text`
	case SQLite:
		q.claim = `INSERT INTO ` + inbox + cols + ` VALUES (?1, ?2, ` + q.now() + `)
ON CONFLICT (consumer_name, message_id) DO NOTHING
RETURNING message_id`
		// WHERE true: SQLite needs it to parse ON CONFLICT after a SELECT.
		q.claimBatch = `INSERT INTO ` + inbox + cols + `
SELECT ?1, j.value, ` + q.now() + ` FROM json_each(?2) AS j WHERE true
ON CONFLICT (consumer_name, message_id) DO NOTHING
RETURNING message_id`
	case MariaDB:
		q.claim = `INSERT INTO ` + inbox + cols + ` VALUES (?, ?, UTC_TIMESTAMP(6)) RETURNING consumer_name, message_id`
		// claimBatch is rendered per batch size: see claimBatchMariaDB.
	case MySQL:
		q.claim = `INSERT INTO ` + inbox + cols + ` VALUES (?, ?, UTC_TIMESTAMP(6))`
	}
}

// purgeQueries renders the purges and their counts, without and with a
// consumer filter.
func (q *queries) purgeQueries(layout inboxdriver.Layout) {
	inbox, effects := q.inbox, q.effects
	for i, byConsumer := range []bool{false, true} {
		where := ` WHERE processed_at < ` + q.cutoff(q.ph(1))
		n := 2
		if byConsumer {
			where += ` AND consumer_name = ` + q.ph(2)
			n = 3
		}
		q.purgeCount[i] = `SELECT count(*) FROM ` + inbox + where
		batch := `SELECT consumer_name, message_id FROM ` + inbox + where + ` LIMIT ` + q.ph(n)
		switch q.d {
		case Postgres:
			// ctid = ANY(ARRAY(…)) bounds the batch and deletes by tuple
			// id; SKIP LOCKED passes over rows that in-flight claims hold.
			// ONLY keeps it to this one table, as in inboxpgx: on a name
			// that has become a partitioned inbox's it deletes nothing,
			// where the same ctids would match other days' rows. The
			// ledger entries of the purged messages go in the same
			// statement.
			q.purge[i] = `WITH purged AS (
    DELETE FROM ONLY ` + inbox + ` WHERE ctid = ANY (ARRAY(
        SELECT ctid FROM ONLY ` + inbox + where + ` LIMIT ` + q.ph(n) + ` FOR UPDATE SKIP LOCKED))
    RETURNING consumer_name, message_id
), effects AS (
    DELETE FROM ` + effects + ` AS e USING purged AS p
     WHERE e.consumer_name = p.consumer_name AND e.message_id = p.message_id
)
SELECT count(*) FROM purged`
			if layout == inboxdriver.LayoutPartitioned {
				q.purge[i] = purgeByKey(inbox, effects, where, q.ph(n))
			}
		case SQLite:
			q.purge[i] = `DELETE FROM ` + inbox + ` WHERE (consumer_name, message_id) IN (
    ` + batch + `)
RETURNING consumer_name, message_id`
			q.purgeSelect[i] = batch
		default:
			// In the order of the processed_at index, whose entries end
			// with the primary key: two purges lock rows in the same order.
			q.purgeSelect[i] = `SELECT consumer_name, message_id FROM ` + inbox + where +
				` ORDER BY processed_at, consumer_name, message_id LIMIT ` + q.ph(n) + ` FOR UPDATE`
		}
	}
}

// forgetQueries renders the forget of one message and its counts.
func (q *queries) forgetQueries() {
	inbox, effects := q.inbox, q.effects
	if q.d == Postgres {
		// Postgres names its parameters, so they may repeat.
		q.forget = `WITH forgotten AS (
    DELETE FROM ` + inbox + ` WHERE consumer_name = $1 AND message_id = $2 RETURNING 1
), effects AS (
    DELETE FROM ` + effects + ` WHERE consumer_name = $1 AND message_id = $2 RETURNING 1
)
SELECT (SELECT count(*) FROM forgotten) + (SELECT count(*) FROM effects)`
	} else {
		q.forget = `DELETE FROM ` + inbox + ` WHERE consumer_name = ? AND message_id = ?`
		q.effectForget = `DELETE FROM ` + effects + ` WHERE consumer_name = ? AND message_id = ?`
	}
	for i, table := range []string{inbox, effects} {
		q.forgetCount[i] = `SELECT count(*) FROM ` + table + ` WHERE consumer_name = ` + q.ph(1) + ` AND message_id = ` + q.ph(2)
	}
}

// statsQueries renders the per-consumer statistics and the table size.
func (q *queries) statsQueries() {
	q.stats = `SELECT consumer_name, count(*), min(processed_at), max(processed_at)
  FROM ` + q.inbox + ` GROUP BY consumer_name ORDER BY consumer_name`
	switch q.d {
	case Postgres:
		// The sum over the partitions of a partitioned table, which has
		// no storage of its own; pg_partition_tree lists no other table.
		q.tableSize = `SELECT coalesce(sum(pg_total_relation_size(relid)), pg_total_relation_size($1::regclass)) FROM pg_partition_tree($1::regclass)`
	case SQLite:
		// dbstat counts the pages of the table and of its indexes.
		q.tableSize = `SELECT coalesce(sum(pgsize), 0) FROM dbstat
 WHERE name IN (SELECT name FROM sqlite_schema WHERE tbl_name = ?)`
	default:
		// InnoDB's own estimate, refreshed with its statistics.
		q.tableSize = `SELECT data_length + index_length FROM information_schema.TABLES
 WHERE table_schema = COALESCE(NULLIF(?, ''), DATABASE()) AND table_name = ?`
	}
}

// deadLetterQueries renders the dead letters' statements and the replay
// requests'.
func (q *queries) deadLetterQueries() {
	dl := q.deadLetters
	q.deadLetter = `INSERT INTO ` + dl + ` (` + deadLetterCols + `)
VALUES (` + q.phs(1, 16) + `)`
	switch q.d {
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
	const markable = ` AND message_id IS NOT NULL AND replay_requested_at IS NULL`
	q.deadLetterMarkOne = `UPDATE ` + dl + ` SET replay_requested_at = ` + q.ph(1) + ` WHERE id = ` + q.ph(2) + markable
	q.deadLetterMarkAll = `UPDATE ` + dl + ` SET replay_requested_at = ` + q.ph(1) + ` WHERE consumer_name = ` + q.ph(2) + markable
	q.deadLetterCountOne = `SELECT count(*) FROM ` + dl + ` WHERE id = ` + q.ph(1) + markable
	q.deadLetterCountAll = `SELECT count(*) FROM ` + dl + ` WHERE consumer_name = ` + q.ph(1) + markable
	q.deadLettersMarked = sel + ` WHERE consumer_name = ` + q.ph(1) + ` AND replay_requested_at IS NOT NULL
 ORDER BY replay_requested_at, id LIMIT ` + q.ph(2)
	q.deadLetterUnmark = `UPDATE ` + dl + ` SET replay_requested_at = NULL WHERE id = ` + q.ph(1) + ` AND replay_requested_at IS NOT NULL`
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
		b.WriteString("(?, ?, UTC_TIMESTAMP(6))")
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

// effectKey renders the condition on a ledger entry's key, with its
// placeholders from n.
func (q *queries) effectKey(n int) string {
	return `consumer_name = ` + q.ph(n) + ` AND message_id = ` + q.ph(n+1) + ` AND step = ` + q.ph(n+2)
}

// effectCols are the columns of a ledger entry, as scanEffect reads them.
func (q *queries) effectCols() string {
	if q.d == Postgres {
		return `consumer_name, message_id::text, step, state, result, attempts, started_at, done_at`
	}
	return `consumer_name, message_id, step, state, result, attempts, started_at, done_at`
}

func (q *queries) effectQueries(effects string) {
	q.effectInsert = `INSERT INTO ` + effects + ` (consumer_name, message_id, step, state, attempts, started_at)
VALUES (` + q.phs(1, 3) + `, 'started', 1, ` + q.ph(4) + `)`
	if !q.d.mysql() {
		q.effectInsert += `
ON CONFLICT (consumer_name, message_id, step) DO NOTHING`
	}
	// SQLite has no FOR UPDATE: there the ledger transaction holds the
	// write lock from its BEGIN IMMEDIATE.
	q.effectGet = `SELECT ` + q.effectCols() + ` FROM ` + effects + ` WHERE ` + q.effectKey(1)
	if q.d != SQLite {
		q.effectGet += ` FOR UPDATE`
	}
	q.effectRestart = `UPDATE ` + effects + `
   SET state = 'started', attempts = attempts + 1, started_at = ` + q.ph(1) + `, result = NULL, done_at = NULL
 WHERE ` + q.effectKey(2)
	q.effectDone = `UPDATE ` + effects + ` SET state = 'done', result = ` + q.ph(1) + `, done_at = ` + q.ph(2) + `
 WHERE ` + q.effectKey(3) + ` AND state = 'started'`
	q.effectFailed = `UPDATE ` + effects + ` SET state = 'failed' WHERE ` + q.effectKey(1) + ` AND state = 'started'`
	q.effectResolve = `UPDATE ` + effects + ` SET state = ` + q.ph(1) + `, result = ` + q.ph(2) + `, done_at = ` + q.ph(3) + `
 WHERE ` + q.effectKey(4) + ` AND state = 'started'`
}

// effectList renders a listing of ledger entries with the filters that
// are set, and its arguments. Only fixed text goes into the statement.
func (q *queries) effectList(consumer, id, state string, before any, limit int) (string, []any) {
	var (
		b    strings.Builder
		args []any
	)
	b.WriteString(`SELECT ` + q.effectCols() + ` FROM ` + q.effects)
	cond := func(column string, v any) {
		if len(args) == 0 {
			b.WriteString("\n WHERE ")
		} else {
			b.WriteString(" AND ")
		}
		args = append(args, v)
		b.WriteString(column + q.ph(len(args)))
	}
	if consumer != "" {
		cond("consumer_name = ", consumer)
	}
	if id != "" {
		cond("message_id = ", id)
	}
	if state != "" {
		cond("state = ", state)
	}
	if before != nil {
		cond("started_at < ", before)
	}
	args = append(args, limit)
	b.WriteString("\n ORDER BY started_at, consumer_name, message_id, step LIMIT " + q.ph(len(args)))
	return b.String(), args
}

// maxKeysPerStatement bounds the keys of one deleteKeys statement, well
// under every engine's limit on placeholders and expression depth.
const maxKeysPerStatement = 200

// msgKey is the key of one message's inbox row.
type msgKey struct{ consumer, id string }

// deleteKeys renders a DELETE from table of the rows of keys, which are at
// most maxKeysPerStatement, on SQLite or MySQL; with before, only of the
// rows processed longer ago than the microseconds it binds (the inbox). It
// returns the arguments too.
func (q *queries) deleteKeys(table string, keys []msgKey, olderThan any) (string, []any) {
	var b strings.Builder
	args := make([]any, 0, 2*len(keys)+1)
	b.WriteString(`DELETE FROM ` + table + ` WHERE `)
	if olderThan != nil {
		b.WriteString(`processed_at < ` + q.cutoff("?") + ` AND `)
		args = append(args, olderThan)
	}
	if q.d == SQLite {
		b.WriteString(`(consumer_name, message_id) IN (VALUES `)
		for i, k := range keys {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString("(?, ?)")
			args = append(args, k.consumer, k.id)
		}
	} else {
		// MySQL and MariaDB turn ORs of equalities on the primary key into
		// index ranges.
		b.WriteString("(")
		for i, k := range keys {
			if i > 0 {
				b.WriteString(" OR ")
			}
			b.WriteString("(consumer_name = ? AND message_id = ?)")
			args = append(args, k.consumer, k.id)
		}
	}
	b.WriteString(")")
	return b.String(), args
}
