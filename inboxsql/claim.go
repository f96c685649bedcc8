package inboxsql

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// maxMariaDBBatch bounds the rows of one INSERT of a MariaDB batch claim,
// well under the 65,535 placeholders of a prepared statement.
const maxMariaDBBatch = 500

// Claims.
//
// The claim is the first statement of the message's transaction:
//
//   - SQLite and Postgres: INSERT … ON CONFLICT DO NOTHING RETURNING. A
//     batch is one statement over json_each (SQLite) or unnest (Postgres).
//   - MySQL and MariaDB: a plain INSERT, whose duplicate-key error (1062)
//     means the row exists. It is not INSERT IGNORE, which would also turn
//     a truncated or converted value into a warning and claim a different
//     id than the one asked for. MariaDB checks each RETURNING row against
//     the id it asked for besides.
//   - MariaDB batch: INSERT IGNORE … RETURNING, which returns exactly the
//     rows it inserted. Every returned row must be an id that was asked for,
//     and every id that was not returned must be found, exactly, as an
//     existing row (a locking read, only when there were duplicates);
//     otherwise the claim fails and rolls back. So a warning that IGNORE
//     swallowed can never pass for a claim or for a duplicate.
//   - MySQL batch: one plain INSERT per id, in the same transaction, since
//     MySQL has no RETURNING and affected rows alone cannot say which ids
//     were new.
//
// Concurrent duplicates.
//
//
// A second delivery of a message whose first delivery is still in flight:
//
//   - Postgres, MySQL and MariaDB: the second claim waits on the first
//     transaction's uncommitted row (the unique key is the lock), then is a
//     Duplicate when the first commits, or claims and applies when the first
//     rolls back. The client's LockTimeout bounds the wait; past it the claim
//     fails with inbox.ErrLockTimeout and the message is retried later. On
//     Postgres the bound is lock_timeout, set for the claim only. On MariaDB
//     it is innodb_lock_wait_timeout, set for the claim statement alone
//     (SET STATEMENT … FOR); on MySQL it is set around the claim and
//     restored. Both count whole seconds: a LockTimeout under a second waits
//     one second. A deadlock (1213) is retried by the client as a conflict.
//   - SQLite: writers are serialised by the database's single write lock,
//     so the second delivery waits for the write lock, whoever holds it,
//     with SQLite's busy handler, and then finds the row and is a
//     Duplicate, or claims it when the first rolled back. The wait is
//     bounded by LockTimeout, applied as the connection's busy_timeout for
//     the BEGIN and the claim only (and restored after); past it the claim
//     fails with inbox.ErrLockTimeout. With no LockTimeout the connection's
//     own busy_timeout bounds the wait, and a busy error (SQLITE_BUSY) is a
//     conflict that the client retries, with backoff, from the BEGIN.
//     Because the lock is database-wide, on SQLite a LockTimeout also runs
//     out behind a long transaction of another message: keep handlers short.

// claim claims id for consumer in tx. bounded reports that the lock wait is
// already bounded by lockTimeout, through SQLite's busy timeout.
func (d *Driver) claim(ctx context.Context, tx *sql.Tx, consumer, id string, lockTimeout time.Duration, bounded bool) (bool, error) {
	args := []any{consumer, id}
	switch d.dialect {
	case SQLite:
		ok, err := claimReturning(ctx, tx, d.q.claim, id, args)
		if bounded {
			err = sqliteLockWait(err, lockTimeout)
		}
		return ok, err
	case Postgres:
		if lockTimeout > 0 {
			if err := setPostgresLockTimeout(ctx, tx, lockTimeout); err != nil {
				return false, err
			}
		}
		ok, err := claimReturning(ctx, tx, d.q.claim, id, args)
		if err != nil || lockTimeout <= 0 {
			return ok, err
		}
		return ok, restorePostgresLockTimeout(ctx, tx)
	case MariaDB:
		var gotConsumer, gotID string
		err := tx.QueryRowContext(ctx, mariaDBLockWait(lockTimeout)+d.q.claim, args...).Scan(&gotConsumer, &gotID)
		switch {
		case d.engine.DuplicateKey(err):
			return false, nil
		case err != nil:
			return false, err
		case gotConsumer != consumer || gotID != id:
			return false, fmt.Errorf("inboxsql: the claim of %s/%s stored %s/%s", consumer, id, gotConsumer, gotID)
		}
		return true, nil
	default: // MySQL
		var ok bool
		err := withMySQLLockWait(ctx, tx, lockTimeout, func() error {
			var err error
			ok, err = d.insertMySQL(ctx, tx, d.q.claim, args)
			return err
		})
		return ok, err
	}
}

// claimReturning runs an INSERT … ON CONFLICT DO NOTHING RETURNING
// message_id of one row, and checks that the row stored is id.
func claimReturning(ctx context.Context, tx *sql.Tx, query, id string, args []any) (bool, error) {
	var got string
	err := tx.QueryRowContext(ctx, query, args...).Scan(&got)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return false, nil
	case err != nil:
		return false, err
	case got != id:
		return false, fmt.Errorf("inboxsql: the claim of id %q stored %q", id, got)
	}
	return true, nil
}

// insertMySQL runs a plain INSERT of one row. A duplicate key (1062) means
// the row exists. Unlike INSERT IGNORE, a plain INSERT in strict mode fails
// on every other problem rather than storing a changed value.
func (d *Driver) insertMySQL(ctx context.Context, tx *sql.Tx, query string, args []any) (bool, error) {
	_, err := tx.ExecContext(ctx, query, args...)
	switch {
	case d.engine.DuplicateKey(err):
		return false, nil
	case err != nil:
		return false, err
	}
	return true, nil
}

// claimBatch claims ids, which hold no duplicates, for consumer in tx.
func (d *Driver) claimBatch(ctx context.Context, tx *sql.Tx, consumer string, ids []string, lockTimeout time.Duration, bounded bool) ([]bool, error) {
	if len(ids) == 0 {
		return []bool{}, nil
	}
	switch d.dialect {
	case SQLite:
		list, err := json.Marshal(ids)
		if err != nil {
			return nil, err
		}
		out, err := claimBatchReturning(ctx, tx, d.q.claimBatch, ids, consumer, string(list))
		if bounded {
			err = sqliteLockWait(err, lockTimeout)
		}
		return out, err
	case Postgres:
		if lockTimeout > 0 {
			if err := setPostgresLockTimeout(ctx, tx, lockTimeout); err != nil {
				return nil, err
			}
		}
		out, err := claimBatchReturning(ctx, tx, d.q.claimBatch, ids, consumer, ids)
		if err != nil || lockTimeout <= 0 {
			return out, err
		}
		return out, restorePostgresLockTimeout(ctx, tx)
	case MariaDB:
		return d.claimBatchMariaDB(ctx, tx, consumer, ids, lockTimeout)
	default: // MySQL
		out := make([]bool, len(ids))
		err := withMySQLLockWait(ctx, tx, lockTimeout, func() error {
			for i, id := range ids {
				var err error
				out[i], err = d.insertMySQL(ctx, tx, d.q.claim, []any{consumer, id})
				if err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		return out, nil
	}
}

// claimBatchReturning runs a batch claim whose rows return the ids it
// inserted.
func claimBatchReturning(ctx context.Context, tx *sql.Tx, query string, ids []string, args ...any) ([]bool, error) {
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var returned []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		returned = append(returned, id)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return markClaimed(ids, returned)
}

// claimBatchMariaDB claims with INSERT IGNORE … RETURNING, in chunks. IGNORE
// turns every error into a warning, not only the duplicate key: a value
// truncated or converted on its way in would be inserted changed, and a row
// skipped for another reason would pass for a duplicate. So every row
// returned must be one asked for, and every id not returned must exist
// exactly as asked; anything else fails the claim.
func (d *Driver) claimBatchMariaDB(ctx context.Context, tx *sql.Tx, consumer string, ids []string, lockTimeout time.Duration) ([]bool, error) {
	prefix := mariaDBLockWait(lockTimeout)
	var returned []string
	for start := 0; start < len(ids); start += maxMariaDBBatch {
		chunk := ids[start:min(start+maxMariaDBBatch, len(ids))]
		args := make([]any, 0, 2*len(chunk))
		for _, id := range chunk {
			args = append(args, consumer, id)
		}
		rows, err := tx.QueryContext(ctx, prefix+d.q.claimBatchMariaDB(len(chunk)), args...)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var gotConsumer, gotID string
			if err := rows.Scan(&gotConsumer, &gotID); err != nil {
				rows.Close()
				return nil, err
			}
			if gotConsumer != consumer {
				rows.Close()
				return nil, fmt.Errorf("inboxsql: the claim for consumer %q stored consumer %q", consumer, gotConsumer)
			}
			returned = append(returned, gotID)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	out, err := markClaimed(ids, returned)
	if err != nil {
		return nil, err
	}
	var rest []string
	for i, id := range ids {
		if !out[i] {
			rest = append(rest, id)
		}
	}
	if err := d.requireExistingMySQL(ctx, tx, consumer, rest); err != nil {
		return nil, err
	}
	return out, nil
}

// requireExistingMySQL checks that consumer has a row for each of ids,
// with exactly that id.
func (d *Driver) requireExistingMySQL(ctx context.Context, tx *sql.Tx, consumer string, ids []string) error {
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	for start := 0; start < len(ids); start += maxMariaDBBatch {
		chunk := ids[start:min(start+maxMariaDBBatch, len(ids))]
		args := make([]any, 0, 1+len(chunk))
		args = append(args, consumer)
		for _, id := range chunk {
			args = append(args, id)
		}
		rows, err := tx.QueryContext(ctx, d.q.existingMySQL(len(chunk)), args...)
		if err != nil {
			return err
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return err
			}
			delete(want, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	for id := range want {
		return fmt.Errorf("inboxsql: the claim of %s/%s inserted nothing and found no row: INSERT IGNORE skipped it for a reason other than a duplicate", consumer, id)
	}
	return nil
}

// lockWaitError is a claim that waited LockTimeout for a lock and gave up.
type lockWaitError struct {
	timeout time.Duration
	err     error
}

func (e *lockWaitError) Error() string {
	return fmt.Sprintf("inboxsql: the claim waited %v for the lock: %v", e.timeout, e.err)
}

func (e *lockWaitError) Unwrap() error { return e.err }
