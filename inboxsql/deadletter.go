package inboxsql

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxtype"
)

// maxMySQLDedupKey is the length, in characters, of the MySQL dedup_key
// column, which an index bounds. A longer key is stored as its hash.
const maxMySQLDedupKey = 512

// DeadLetter implements inboxdriver.Admin.
func (d *Driver) DeadLetter(ctx context.Context, dl *inboxtype.DeadLetter) error {
	headers := dl.Headers
	if headers == nil {
		headers = map[string]string{}
	}
	hj, err := json.Marshal(headers)
	if err != nil {
		return fmt.Errorf("inboxsql: encode headers: %w", err)
	}
	var messageID sql.NullString
	if dl.MessageID != "" {
		messageID = sql.NullString{String: dl.MessageID, Valid: true}
	}
	seen := d.timeArg(dl.LastSeen)
	_, err = d.db.ExecContext(ctx, d.q.deadLetter,
		dl.Consumer, d.dedupKey(dl.DedupKey), messageID, d.text(dl.Transport), d.text(dl.Queue),
		dl.Partition, dl.Offset, d.text(dl.BrokerID), dl.Key, string(hj), dl.Payload,
		d.text(dl.Reason), d.text(dl.Error), dl.Attempts, seen, seen)
	return err
}

// text makes s storable in a text column: Postgres and MySQL refuse
// invalid UTF-8 (and Postgres a NUL byte), which would make a message
// impossible to dead-letter. SQLite stores any bytes.
func (d *Driver) text(s string) string {
	if d.dialect == SQLite || (utf8.ValidString(s) && !strings.ContainsRune(s, 0)) {
		return s
	}
	return strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", "\uFFFD"), "\uFFFD")
}

// dedupKey is text(key), hashed when it is too long for MySQL's column.
func (d *Driver) dedupKey(key string) string {
	key = d.text(key)
	if d.dialect.mysql() && utf8.RuneCountInString(key) > maxMySQLDedupKey {
		sum := sha256.Sum256([]byte(key))
		return "sha256:" + hex.EncodeToString(sum[:])
	}
	return key
}

// DeadLetters implements inboxdriver.Admin.
func (d *Driver) DeadLetterList(ctx context.Context, p *inboxtype.DeadLetterListParams) ([]*inboxtype.DeadLetter, error) {
	var rows *sql.Rows
	var err error
	if p.Consumer == "" {
		rows, err = d.db.QueryContext(ctx, d.q.deadLetters1, p.Limit)
	} else {
		rows, err = d.db.QueryContext(ctx, d.q.deadLetters2, p.Consumer, p.Limit)
	}
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*inboxtype.DeadLetter
	for rows.Next() {
		dl, err := d.scanDeadLetter(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, dl)
	}
	return out, rows.Err()
}

// DeadLetterGet implements inboxdriver.Admin.
func (d *Driver) DeadLetterGet(ctx context.Context, id int64) (*inboxtype.DeadLetter, error) {
	dl, err := d.scanDeadLetter(d.db.QueryRowContext(ctx, d.q.deadLetterGet, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("dead letter %d: %w", id, inboxdriver.ErrNotFound)
	}
	return dl, err
}

// DeadLetterDelete implements inboxdriver.Admin.
func (d *Driver) DeadLetterDelete(ctx context.Context, id int64) (bool, error) {
	res, err := d.db.ExecContext(ctx, d.q.deadLetterDelete, id)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

func (d *Driver) scanDeadLetter(row interface{ Scan(dest ...any) error }) (*inboxtype.DeadLetter, error) {
	var dl inboxtype.DeadLetter
	var messageID sql.NullString
	var headers []byte
	err := row.Scan(&dl.ID, &dl.Consumer, &dl.DedupKey, &messageID, &dl.Transport, &dl.Queue,
		&dl.Partition, &dl.Offset, &dl.BrokerID, &dl.Key, &headers, &dl.Payload,
		&dl.Reason, &dl.Error, &dl.Attempts, d.timeScanner(&dl.FirstSeen), d.timeScanner(&dl.LastSeen))
	if err != nil {
		return nil, err
	}
	dl.MessageID = messageID.String
	if len(headers) > 0 {
		if err := json.Unmarshal(headers, &dl.Headers); err != nil {
			return nil, fmt.Errorf("inboxsql: dead letter %d: decode headers: %w", dl.ID, err)
		}
	}
	return &dl, nil
}
