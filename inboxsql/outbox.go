package inboxsql

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxtype"
)

var _ inboxdriver.OutboxStore[*sql.Tx] = (*Driver)(nil)

// maxEnqueueRows bounds the rows of one INSERT, so that its bind
// parameters stay within every engine's limit (SQLite's 32,766). A larger
// enqueue takes one statement per this many rows, in the same transaction.
const maxEnqueueRows = 1000

// stmt builds a statement with its bind parameters, numbering Postgres's
// placeholders in order. Only placeholders and quoted identifiers are
// ever written into the SQL.
type stmt struct {
	d    Dialect
	sql  strings.Builder
	args []any
}

func (s *stmt) add(parts ...string) *stmt {
	for _, p := range parts {
		s.sql.WriteString(p)
	}
	return s
}

// arg adds v as a bind parameter at this point of the statement.
func (s *stmt) arg(v any) *stmt {
	s.args = append(s.args, v)
	if s.d == Postgres {
		s.sql.WriteString("$" + strconv.Itoa(len(s.args)))
	} else {
		s.sql.WriteString("?")
	}
	return s
}

// in adds the list (v1, v2, …) of bind parameters.
func (s *stmt) in(vs []string) *stmt {
	s.sql.WriteString("(")
	for i, v := range vs {
		if i > 0 {
			s.sql.WriteString(", ")
		}
		s.arg(v)
	}
	s.sql.WriteString(")")
	return s
}

// inBytes adds the list of bind parameters vs, each sent as bytes.
func (s *stmt) inBytes(vs []string) *stmt {
	s.sql.WriteString("(")
	for i, v := range vs {
		if i > 0 {
			s.sql.WriteString(", ")
		}
		s.arg([]byte(v))
	}
	s.sql.WriteString(")")
	return s
}

func (d *Driver) stmt(parts ...string) *stmt {
	s := &stmt{d: d.dialect}
	return s.add(parts...)
}

func (s *stmt) exec(ctx context.Context, q execQuerier) (int64, error) {
	res, err := q.ExecContext(ctx, s.sql.String(), s.args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (d *Driver) outboxTable() string { return d.tables.Qualify(d.dialect.schema(), d.tables.Outbox) }
func (d *Driver) outboxKeysTable() string {
	return d.tables.Qualify(d.dialect.schema(), d.tables.OutboxKeys)
}

// outboxCols are the columns queryOutboxRows reads, for a table aliased o.
func (d *Driver) outboxCols() string { return d.outboxColsOf("o.") }

// outboxColsOf are the columns queryOutboxRows reads, each prefixed with
// p: SQLite's RETURNING takes no table names.
func (d *Driver) outboxColsOf(p string) string {
	id := p + "id"
	if d.dialect == Postgres {
		id += "::text"
	}
	return id + `, ` + p + `topic, ` + p + `msg_key, COALESCE(` + p + `key_seq, 0), ` + p + `headers, ` + p + `payload,
       COALESCE(` + p + `causation_id, ''), ` + p + `created_at, ` + p + `available_at, ` + p + `attempts,
       COALESCE(` + p + `last_error, ''), CASE WHEN ` + p + `claim_token IS NULL THEN 0 ELSE 1 END, ` + p + `published_at, ` + p + `parked_at`
}

// OutboxBegin implements inboxdriver.OutboxStore.
func (d *Driver) OutboxBegin(ctx context.Context) (*sql.Tx, error) {
	return d.db.BeginTx(ctx, d.txOptions)
}

// The outbox.
//
// The Driver keeps the producer's outbox (package outbox): it implements
// inboxdriver.OutboxStore. An enqueue is one multi-row INSERT (up to 1,000
// events a statement), in ordered mode after one upsert of the keys'
// sequences (on MySQL, an upsert and a locking read). A relay's claim is a
// short transaction: FOR UPDATE SKIP LOCKED on Postgres, MySQL and
// MariaDB (at read committed on MySQL, whose gap locks would otherwise
// deadlock two claims), and the write lock on SQLite, which serialises
// claims. Any number of relays may run on each engine.

// OutboxEnqueue implements inboxdriver.OutboxStore: one multi-row INSERT
// for up to maxEnqueueRows rows. In ordered mode one upsert first takes
// the sequence numbers of every key of the enqueue (on MySQL, an upsert and
// a locking read).
func (d *Driver) OutboxEnqueue(ctx context.Context, tx *sql.Tx, p *inboxdriver.OutboxEnqueueParams) error {
	var seqs []int64
	if p.Ordered {
		var err error
		if seqs, err = d.keySeqs(ctx, tx, p.Rows); err != nil {
			return err
		}
	}
	for from := 0; from < len(p.Rows); from += maxEnqueueRows {
		rows := p.Rows[from:min(len(p.Rows), from+maxEnqueueRows)]
		s := d.stmt(`INSERT INTO `, d.outboxTable(), ` (id, topic, msg_key, key_seq, headers, payload, causation_id, created_at, available_at) VALUES `)
		for i, r := range rows {
			if i > 0 {
				s.add(", ")
			}
			h, err := encodeOutboxHeaders(r.Headers)
			if err != nil {
				return err
			}
			var seq, key, cause any
			if r.Key != nil {
				key = r.Key
			}
			if seqs != nil && seqs[from+i] > 0 {
				seq = seqs[from+i]
			}
			if r.CausationID != "" {
				cause = r.CausationID
			}
			at := d.timeArg(r.CreatedAt)
			s.add("(").arg(r.ID).add(", ").arg(r.Topic).add(", ").arg(key).add(", ").arg(seq).add(", ").
				arg(h).add(", ").arg(r.Payload).add(", ").arg(cause).add(", ").arg(at).add(", ").arg(at).add(")")
		}
		if _, err := s.exec(ctx, tx); err != nil {
			return err
		}
	}
	return nil
}

// keySeqs takes the next sequence numbers of the keys of rows, in one
// upsert, and returns each row's: 0 for a row with no key.
func (d *Driver) keySeqs(ctx context.Context, tx *sql.Tx, rows []inboxdriver.OutboxRow) ([]int64, error) {
	count := map[string]int64{}
	for _, r := range rows {
		if r.Key != nil {
			count[string(r.Key)]++
		}
	}
	if len(count) == 0 {
		return make([]int64, len(rows)), nil
	}
	// Keys in order, so that two enqueues lock them in the same order.
	keys := make([]string, 0, len(count))
	for k := range count {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	kt := d.outboxKeysTable()
	values := func(s *stmt) *stmt {
		for i, k := range keys {
			if i > 0 {
				s.add(", ")
			}
			s.add("(").arg([]byte(k)).add(", ").arg(count[k]).add(")")
		}
		return s
	}
	last := make(map[string]int64, len(keys))
	switch d.dialect {
	case Postgres, SQLite:
		s := values(d.stmt(`INSERT INTO `, kt, ` AS ks (msg_key, last_seq) VALUES `)).
			add(` ON CONFLICT (msg_key) DO UPDATE SET last_seq = ks.last_seq + excluded.last_seq RETURNING msg_key, last_seq`)
		if err := scanKeySeqs(ctx, tx, s, last); err != nil {
			return nil, err
		}
	default:
		s := values(d.stmt(`INSERT INTO `, kt, ` (msg_key, last_seq) VALUES `)).
			add(` ON DUPLICATE KEY UPDATE last_seq = last_seq + VALUES(last_seq)`)
		if _, err := s.exec(ctx, tx); err != nil {
			return nil, err
		}
		// A locking read, which sees the latest committed value whatever
		// the transaction's snapshot; the upsert holds the rows' locks.
		r := d.stmt(`SELECT msg_key, last_seq FROM `, kt, ` WHERE msg_key IN `).inBytes(keys).add(` FOR UPDATE`)
		if err := scanKeySeqs(ctx, tx, r, last); err != nil {
			return nil, err
		}
	}
	if len(last) != len(keys) {
		return nil, fmt.Errorf("inboxsql: the key sequences came back for %d keys of %d", len(last), len(keys))
	}
	// The rows of a key take its numbers up to last, in order.
	next := make(map[string]int64, len(keys))
	for k, l := range last {
		next[k] = l - count[k] + 1
	}
	out := make([]int64, len(rows))
	for i, r := range rows {
		if r.Key != nil {
			out[i] = next[string(r.Key)]
			next[string(r.Key)]++
		}
	}
	return out, nil
}

func scanKeySeqs(ctx context.Context, tx *sql.Tx, s *stmt, into map[string]int64) error {
	rows, err := tx.QueryContext(ctx, s.sql.String(), s.args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var k []byte
		var n int64
		if err := rows.Scan(&k, &n); err != nil {
			return err
		}
		into[string(k)] = n
	}
	return rows.Err()
}

// OutboxClaim implements inboxdriver.OutboxAdmin in one short
// transaction: the ordered claim, then the unordered one, each of at most
// p.Limit rows.
func (d *Driver) OutboxClaim(ctx context.Context, p *inboxdriver.OutboxClaimParams) (out []*inboxdriver.OutboxRow, err error) {
	// On MySQL, read committed: a locking read at repeatable read also
	// locks the gaps of the index it scans, where another claim's update
	// must insert, and two claims deadlock.
	var opts *sql.TxOptions
	if d.dialect.mysql() {
		opts = &sql.TxOptions{Isolation: sql.LevelReadCommitted}
	}
	tx, err := d.db.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	ordered, err := d.claimOrdered(ctx, tx, p)
	if err != nil {
		return nil, err
	}
	unordered, err := d.claimUnordered(ctx, tx, p)
	if err != nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, err
	}
	out = append(unordered, ordered...)
	inboxdriver.SortOutboxRows(out)
	return out, nil
}

// ready is the condition of a row that a claim may take, for a table
// aliased o, with the claim's time as its one parameter.
func (d *Driver) readyRows(s *stmt, alias string, ordered bool, now any) *stmt {
	seq := alias + `.key_seq IS NULL`
	if ordered {
		seq = alias + `.key_seq IS NOT NULL`
	}
	return s.add(alias, `.published_at IS NULL AND `, alias, `.parked_at IS NULL AND `, seq, ` AND `, alias, `.available_at <= `).arg(now)
}

func (d *Driver) claimUnordered(ctx context.Context, tx *sql.Tx, p *inboxdriver.OutboxClaimParams) ([]*inboxdriver.OutboxRow, error) {
	ob := d.outboxTable()
	now, lease := d.timeArg(p.Now), d.timeArg(p.LeaseUntil)
	switch d.dialect {
	case Postgres:
		s := d.stmt(`WITH c AS (SELECT o.id FROM `, ob, ` AS o WHERE `)
		d.readyRows(s, "o", false, now).add(` ORDER BY o.available_at LIMIT `).arg(p.Limit).add(` FOR UPDATE SKIP LOCKED)
UPDATE `, ob, ` AS o SET claim_token = `).arg(p.Token).add(`, available_at = `).arg(lease).add(` FROM c WHERE o.id = c.id RETURNING `, d.outboxCols())
		return d.queryOutboxRows(ctx, tx, s)
	case SQLite:
		// The write lock, which BEGIN IMMEDIATE took, serialises claims.
		s := d.stmt(`UPDATE `, ob, ` AS o SET claim_token = `).arg(p.Token).add(`, available_at = `).arg(lease).
			add(` WHERE o.id IN (SELECT c.id FROM `, ob, ` AS c WHERE `)
		d.readyRows(s, "c", false, now).add(` ORDER BY c.available_at LIMIT `).arg(p.Limit).add(`) RETURNING `, d.outboxColsOf(""))
		return d.queryOutboxRows(ctx, tx, s)
	default:
		s := d.stmt(`SELECT o.id FROM `, ob, ` AS o WHERE `)
		d.readyRows(s, "o", false, now).add(` ORDER BY o.available_at LIMIT `).arg(p.Limit).add(` FOR UPDATE SKIP LOCKED`)
		ids, err := queryStrings(ctx, tx, s)
		if err != nil || len(ids) == 0 {
			return nil, err
		}
		return d.markClaimed(ctx, tx, p, ids)
	}
}

// markClaimed sets the claim on the rows ids, which the transaction has
// locked or which no other claim can take, and reads them.
func (d *Driver) markClaimed(ctx context.Context, tx *sql.Tx, p *inboxdriver.OutboxClaimParams, ids []string) ([]*inboxdriver.OutboxRow, error) {
	ob := d.outboxTable()
	u := d.stmt(`UPDATE `, ob, ` SET claim_token = `).arg(p.Token).add(`, available_at = `).arg(d.timeArg(p.LeaseUntil)).add(` WHERE id IN `).in(ids)
	if _, err := u.exec(ctx, tx); err != nil {
		return nil, err
	}
	s := d.stmt(`SELECT `, d.outboxCols(), ` FROM `, ob, ` AS o WHERE o.id IN `).in(ids)
	return d.queryOutboxRows(ctx, tx, s)
}

// maxWalk bounds the keys one ordered claim walks, within MySQL's default
// limit on a recursive query's depth (cte_max_recursion_depth, 1000).
const maxWalk = 1000

// claimOrdered claims the heads of keys (each key's first pending row,
// when it is ready) and, behind each, the run of its key's next rows up to
// the first that is parked or not ready. No other claim takes a run's rows
// while its head stands, so only the heads are locked.
//
// The heads are found by a walk of the keys that have pending ordered
// rows, one index descent each (a skip scan of the index that migration
// 007 made), from the key after the driver's cursor on and then wrapping
// round to the first, until Limit heads are ready or maxWalk keys were
// seen. The walk is a plain read, whose snapshot, if stale, can only see
// more earlier rows, never fewer; the locking read that follows checks
// each head again.
//
// Without p.WholeRuns every head is locked and the runs are cut to Limit
// by position, and the cursor moves to the last key walked. With it, see
// claimWholeRuns.
func (d *Driver) claimOrdered(ctx context.Context, tx *sql.Tx, p *inboxdriver.OutboxClaimParams) ([]*inboxdriver.OutboxRow, error) {
	from := d.keys.Key()
	walk := min(maxWalk, max(2*p.Limit, 100))
	heads, last, n, err := d.walkKeys(ctx, tx, p, from, false, walk, p.Limit, nil)
	if err != nil {
		return nil, err
	}
	if n < walk {
		// The walk reached the last key: wrap round to the first ones.
		var wlast []byte
		heads, wlast, _, err = d.walkKeys(ctx, tx, p, from, true, walk-n, p.Limit, heads)
		if err != nil {
			return nil, err
		}
		if wlast != nil {
			last = wlast
		}
	}
	if p.WholeRuns {
		return d.claimWholeRuns(ctx, tx, p, from, heads)
	}
	if last != nil {
		d.keys.Set(last)
	}
	if len(heads) > p.Limit {
		heads = heads[:p.Limit]
	}
	heads, err = d.lockHeads(ctx, tx, p, heads)
	if err != nil || len(heads) == 0 {
		return nil, err
	}
	type runRow struct {
		id string
		rn int
	}
	var keep []runRow
	for from := 0; from < len(heads); from += runsPerStatement {
		runs, err := d.readRuns(ctx, tx, p, heads[from:min(len(heads), from+runsPerStatement)], p.Limit)
		if err != nil {
			return nil, err
		}
		for _, run := range runs {
			for i, id := range run {
				keep = append(keep, runRow{id: id, rn: i + 1})
			}
		}
	}
	// The first Limit by position, which keeps a prefix of each key.
	slices.SortStableFunc(keep, func(a, b runRow) int { return a.rn - b.rn })
	keep = keep[:min(len(keep), p.Limit)]
	ids := make([]string, len(keep))
	for i, rr := range keep {
		ids[i] = rr.id
	}
	if len(ids) == 0 {
		return nil, nil
	}
	return d.markClaimed(ctx, tx, p, ids)
}

// claimWholeRuns claims, for OutboxClaimParams.WholeRuns, the ready runs
// of the keys of heads, in the walk's order, until they fill p.Limit (the
// last cut to fit). It locks the heads a chunk at a time, each chunk as
// many keys as the runs taken so far say the room left needs (one key at
// first), so that it locks few keys it does not take, and reads the runs
// of the heads it locked: the keys after those stay free for other
// claims. The cursor moves to the last key taken.
func (d *Driver) claimWholeRuns(ctx context.Context, tx *sql.Tx, p *inboxdriver.OutboxClaimParams, from []byte, heads []keyHead) ([]*inboxdriver.OutboxRow, error) {
	var ids []string
	keys := 0 // the keys whose runs ids holds
	for len(heads) > 0 && len(ids) < p.Limit {
		room := p.Limit - len(ids)
		n := 1
		if keys > 0 {
			n = (room*keys + len(ids) - 1) / len(ids) // room ÷ the mean run, rounded up
		}
		n = min(n, len(heads), runsPerStatement)
		chunk, err := d.lockHeads(ctx, tx, p, heads[:n])
		if err != nil {
			return nil, err
		}
		heads = heads[n:]
		if len(chunk) == 0 {
			continue
		}
		runs, err := d.readRuns(ctx, tx, p, chunk, room)
		if err != nil {
			return nil, err
		}
		for _, run := range runs {
			if room := p.Limit - len(ids); len(run) > room {
				run = run[:room]
			}
			if len(run) > 0 {
				ids = append(ids, run...)
				keys++
			}
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := d.markClaimed(ctx, tx, p, ids)
	if err == nil {
		d.keys.Advance(from, rows)
	}
	return rows, err
}

// lockHeads locks those of heads that are still ready and not locked by
// another claim (FOR UPDATE SKIP LOCKED), and returns them, in order. On
// SQLite, whose write lock serialises claims, it returns heads.
func (d *Driver) lockHeads(ctx context.Context, tx *sql.Tx, p *inboxdriver.OutboxClaimParams, heads []keyHead) ([]keyHead, error) {
	if d.dialect == SQLite || len(heads) == 0 {
		return heads, nil
	}
	ids := make([]string, len(heads))
	for i, h := range heads {
		ids[i] = h.id
	}
	l := d.stmt(`SELECT o.id FROM `, d.outboxTable(), ` AS o WHERE o.id IN `).in(ids).add(` AND `)
	d.readyRows(l, "o", true, d.timeArg(p.Now)).add(` FOR UPDATE SKIP LOCKED`)
	locked, err := queryStrings(ctx, tx, l)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(heads, func(h keyHead) bool { return !slices.Contains(locked, h.id) }), nil
}

// runsPerStatement bounds the heads whose runs one statement reads.
const runsPerStatement = 200

// readRuns reads the ready run of each of heads, at most runsPerStatement
// of them, with one index range each: the ids of the key's pending rows
// from its head on, at most limit, up to the first that is parked or not
// ready, in sequence order.
func (d *Driver) readRuns(ctx context.Context, tx *sql.Tx, p *inboxdriver.OutboxClaimParams, heads []keyHead, limit int) ([][]string, error) {
	now := d.timeArg(p.Now)
	r := d.stmt()
	for i, h := range heads {
		if i > 0 {
			r.add(`
UNION ALL `)
		}
		r.add(`SELECT * FROM (SELECT s.id, `, strconv.Itoa(i), ` AS h, s.key_seq, CASE WHEN s.parked_at IS NULL AND s.available_at <= `).arg(now).
			add(` THEN 1 ELSE 0 END AS ready FROM `, d.outboxTable(), ` AS s WHERE s.published_at IS NULL AND s.key_seq IS NOT NULL AND s.msg_key = `).arg(h.key).
			add(` AND s.key_seq >= `).arg(h.seq).add(` ORDER BY s.key_seq LIMIT `).arg(limit).add(`) AS r`, strconv.Itoa(i))
	}
	rows, err := tx.QueryContext(ctx, r.sql.String(), r.args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	type got struct {
		id    string
		seq   int64
		ready bool
	}
	per := make([][]got, len(heads))
	for rows.Next() {
		var g got
		var h int
		if err := rows.Scan(&g.id, &h, &g.seq, &g.ready); err != nil {
			return nil, err
		}
		if h < 0 || h >= len(heads) {
			return nil, fmt.Errorf("inboxsql: the runs came back for head %d of %d", h, len(heads))
		}
		per[h] = append(per[h], g)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	// Keep each key's ready prefix from its head, in sequence order.
	runs := make([][]string, len(heads))
	for k, run := range per {
		slices.SortFunc(run, func(a, b got) int { return cmp.Compare(a.seq, b.seq) })
		for _, g := range run {
			if !g.ready {
				break
			}
			runs[k] = append(runs[k], g.id)
		}
	}
	return runs, nil
}

// keyHead is a key's first pending ordered row.
type keyHead struct {
	id  string
	key []byte
	seq int64
}

// walkKeys walks at most limit keys that have pending ordered rows, in
// key order: those greater than from, or with wrapped those not greater.
// It appends the ready heads to heads until it holds want, and returns
// them, the last key walked and how many keys it walked.
func (d *Driver) walkKeys(ctx context.Context, tx *sql.Tx, p *inboxdriver.OutboxClaimParams, from []byte, wrapped bool, limit, want int, heads []keyHead) ([]keyHead, []byte, int, error) {
	if limit <= 0 || len(heads) >= want {
		return heads, nil, 0, nil
	}
	ob := d.outboxTable()
	// next is the first key with pending ordered rows after the lower
	// bound, which the caller writes.
	next := func(s *stmt) *stmt {
		s.add(`(SELECT p.msg_key FROM `, ob, ` AS p WHERE p.published_at IS NULL AND p.key_seq IS NOT NULL`)
		if wrapped {
			s.add(` AND p.msg_key <= `).arg(from)
		}
		return s.add(` AND p.msg_key `)
	}
	s := d.stmt(`WITH RECURSIVE walk (k, n) AS (
    SELECT `)
	if wrapped {
		next(s).add(`>= `).arg([]byte{}) // the first key of all
	} else {
		next(s).add(`> `).arg(from)
	}
	s.add(` ORDER BY p.msg_key LIMIT 1), 1
    UNION ALL
    SELECT `)
	next(s).add(`> w.k ORDER BY p.msg_key LIMIT 1), w.n + 1 FROM walk AS w WHERE w.k IS NOT NULL AND w.n < `).arg(limit).add(`
)
SELECT w.k, h.id, h.key_seq, CASE WHEN h.parked_at IS NULL AND h.available_at <= `).arg(d.timeArg(p.Now)).add(` THEN 1 ELSE 0 END
  FROM walk AS w JOIN `, ob, ` AS h ON h.id = (
       SELECT q.id FROM `, ob, ` AS q WHERE q.msg_key = w.k AND q.published_at IS NULL AND q.key_seq IS NOT NULL ORDER BY q.key_seq LIMIT 1)
 ORDER BY w.n`)
	rows, err := tx.QueryContext(ctx, s.sql.String(), s.args...)
	if err != nil {
		return nil, nil, 0, err
	}
	defer rows.Close()
	var last []byte
	n := 0
	for rows.Next() {
		var h keyHead
		var ready bool
		if err := rows.Scan(&h.key, &h.id, &h.seq, &ready); err != nil {
			return nil, nil, 0, err
		}
		n++
		last = h.key
		if ready {
			heads = append(heads, h)
			if len(heads) >= want {
				break
			}
		}
	}
	return heads, last, n, rows.Err()
}

func queryStrings(ctx context.Context, tx *sql.Tx, s *stmt) ([]string, error) {
	rows, err := tx.QueryContext(ctx, s.sql.String(), s.args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

func (d *Driver) queryOutboxRows(ctx context.Context, q execQuerier, s *stmt) ([]*inboxdriver.OutboxRow, error) {
	rows, err := q.QueryContext(ctx, s.sql.String(), s.args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*inboxdriver.OutboxRow
	for rows.Next() {
		r := &inboxdriver.OutboxRow{}
		var headers []byte
		var claimed int
		if err := rows.Scan(&r.ID, &r.Topic, &r.Key, &r.KeySeq, &headers, &r.Payload, &r.CausationID,
			d.timeScanner(&r.CreatedAt), d.timeScanner(&r.AvailableAt), &r.Attempts, &r.LastError, &claimed,
			d.nullTimeScanner(&r.PublishedAt), d.nullTimeScanner(&r.ParkedAt)); err != nil {
			return nil, err
		}
		r.Claimed = claimed == 1
		if len(headers) > 0 && string(headers) != "{}" {
			if err := json.Unmarshal(headers, &r.Headers); err != nil {
				return nil, fmt.Errorf("inboxsql: outbox row %s: read headers: %w", r.ID, err)
			}
		}
		if r.Payload == nil {
			r.Payload = []byte{}
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// OutboxAck implements inboxdriver.OutboxAdmin.
func (d *Driver) OutboxAck(ctx context.Context, p *inboxdriver.OutboxAckParams) (int64, error) {
	var s *stmt
	if p.Keep {
		s = d.stmt(`UPDATE `, d.outboxTable(), ` SET published_at = `).arg(d.timeArg(p.Now)).add(`, claim_token = NULL WHERE claim_token = `).arg(p.Token)
	} else {
		s = d.stmt(`DELETE FROM `, d.outboxTable(), ` WHERE claim_token = `).arg(p.Token)
	}
	return s.add(` AND id IN `).in(p.IDs).exec(ctx, d.db)
}

// OutboxReject implements inboxdriver.OutboxAdmin.
func (d *Driver) OutboxReject(ctx context.Context, p *inboxdriver.OutboxRejectParams) (bool, error) {
	var parked any
	if p.Park {
		parked = d.timeArg(p.Now)
	}
	n, err := d.stmt(`UPDATE `, d.outboxTable(), ` SET attempts = attempts + 1, last_error = `).arg(p.Error).
		add(`, claim_token = NULL, available_at = `).arg(d.timeArg(p.AvailableAt)).add(`, parked_at = `).arg(parked).
		add(` WHERE id = `).arg(p.ID).add(` AND claim_token = `).arg(p.Token).exec(ctx, d.db)
	return n == 1, err
}

// OutboxRelease implements inboxdriver.OutboxAdmin.
func (d *Driver) OutboxRelease(ctx context.Context, p *inboxdriver.OutboxReleaseParams) (int64, error) {
	return d.stmt(`UPDATE `, d.outboxTable(), ` SET claim_token = NULL, available_at = `).arg(d.timeArg(p.AvailableAt)).
		add(` WHERE claim_token = `).arg(p.Token).add(` AND id IN `).in(p.IDs).exec(ctx, d.db)
}

// OutboxStats implements inboxdriver.OutboxAdmin.
func (d *Driver) OutboxStats(ctx context.Context) (*inboxtype.OutboxStats, error) {
	const pending = `published_at IS NULL AND parked_at IS NULL`
	q := `SELECT COALESCE(SUM(CASE WHEN ` + pending + ` THEN 1 ELSE 0 END), 0),
       COALESCE(SUM(CASE WHEN published_at IS NULL AND parked_at IS NOT NULL THEN 1 ELSE 0 END), 0),
       COALESCE(SUM(CASE WHEN published_at IS NOT NULL THEN 1 ELSE 0 END), 0),
       MIN(CASE WHEN ` + pending + ` THEN created_at END)
  FROM ` + d.outboxTable()
	s := &inboxtype.OutboxStats{}
	err := d.db.QueryRowContext(ctx, q).Scan(&s.Pending, &s.Parked, &s.Published, d.nullTimeScanner(&s.OldestPending))
	if err != nil {
		return nil, err
	}
	return s, nil
}

// OutboxList implements inboxdriver.OutboxAdmin.
func (d *Driver) OutboxList(ctx context.Context, p *inboxdriver.OutboxListParams) ([]*inboxdriver.OutboxRow, error) {
	s := d.stmt(`SELECT `, d.outboxCols(), ` FROM `, d.outboxTable(), ` AS o`)
	switch p.State {
	case "":
	case inboxdriver.OutboxPending:
		s.add(` WHERE o.published_at IS NULL AND o.parked_at IS NULL`)
	case inboxdriver.OutboxParked:
		s.add(` WHERE o.published_at IS NULL AND o.parked_at IS NOT NULL`)
	case inboxdriver.OutboxPublished:
		s.add(` WHERE o.published_at IS NOT NULL`)
	default:
		return nil, fmt.Errorf("inboxsql: unknown outbox state %q", p.State)
	}
	s.add(` ORDER BY o.created_at, o.id LIMIT `).arg(p.Limit)
	return d.queryOutboxRows(ctx, d.db, s)
}

// OutboxGet implements inboxdriver.OutboxAdmin.
func (d *Driver) OutboxGet(ctx context.Context, id string) (*inboxdriver.OutboxRow, error) {
	rows, err := d.queryOutboxRows(ctx, d.db, d.stmt(`SELECT `, d.outboxCols(), ` FROM `, d.outboxTable(), ` AS o WHERE o.id = `).arg(id))
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, inboxdriver.ErrNotFound
	}
	return rows[0], nil
}

// OutboxSet implements inboxdriver.OutboxAdmin.
func (d *Driver) OutboxSet(ctx context.Context, p *inboxdriver.OutboxSetParams) (bool, error) {
	now := d.timeArg(p.Now)
	s := d.stmt(`UPDATE `, d.outboxTable(), ` SET `)
	switch p.Action {
	case inboxdriver.OutboxRetryNow:
		s.add(`available_at = `).arg(now).add(` WHERE id = `).arg(p.ID).add(` AND published_at IS NULL AND parked_at IS NULL`)
	case inboxdriver.OutboxParkRow:
		s.add(`parked_at = `).arg(now).add(`, claim_token = NULL WHERE id = `).arg(p.ID).add(` AND published_at IS NULL AND parked_at IS NULL`)
	case inboxdriver.OutboxUnpark:
		s.add(`parked_at = NULL, attempts = 0, available_at = `).arg(now).add(` WHERE id = `).arg(p.ID).add(` AND published_at IS NULL AND parked_at IS NOT NULL`)
	default:
		return false, inboxdriver.UnknownOutboxAction(p.Action)
	}
	n, err := s.exec(ctx, d.db)
	return n == 1, err
}

// OutboxPurgePublished implements inboxdriver.OutboxAdmin.
func (d *Driver) OutboxPurgePublished(ctx context.Context, p *inboxdriver.OutboxPurgeParams) (int64, error) {
	ob := d.outboxTable()
	before := d.timeArg(p.Before)
	switch d.dialect {
	case Postgres:
		return d.stmt(`DELETE FROM `, ob, ` WHERE id IN (SELECT id FROM `, ob, ` WHERE published_at < `).arg(before).
			add(` LIMIT `).arg(p.Limit).add(` FOR UPDATE SKIP LOCKED)`).exec(ctx, d.db)
	case SQLite:
		return d.stmt(`DELETE FROM `, ob, ` WHERE rowid IN (SELECT rowid FROM `, ob, ` WHERE published_at < `).arg(before).
			add(` LIMIT `).arg(p.Limit).add(`)`).exec(ctx, d.db)
	default:
		return d.stmt(`DELETE FROM `, ob, ` WHERE published_at < `).arg(before).add(` ORDER BY published_at LIMIT `).arg(p.Limit).exec(ctx, d.db)
	}
}

// encodeOutboxHeaders is the stored form of a message's headers: a JSON
// object.
func encodeOutboxHeaders(h map[string]string) (string, error) {
	if len(h) == 0 {
		return "{}", nil
	}
	b, err := json.Marshal(h)
	if err != nil {
		return "", fmt.Errorf("inboxsql: encode headers: %w", err)
	}
	return string(b), nil
}
