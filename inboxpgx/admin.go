package inboxpgx

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxtype"
)

// Classify implements inboxdriver.Admin. A connection that could not be
// made is unavailability whatever SQLSTATE the server gave for refusing it
// (CONNECT revoked 42501, no such database 3D000, no such role 28000): it
// is checked before the server's codes. A commit abandoned after
// Config.CommitTimeout (ErrCommitTimeout) is unavailability too: its
// outcome is unknown, and the redelivery finds it out.
func (d *Driver) Classify(err error) inboxdriver.ErrorClass {
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) || errors.Is(err, ErrCommitTimeout) {
		return inboxdriver.ClassUnavailable
	}
	// A server error (*pgconn.PgError), or one of this module's that says
	// what the server would have said.
	var st interface{ SQLState() string }
	if errors.As(err, &st) {
		return classifyCode(st.SQLState())
	}
	// A context that ended is the caller's doing, not the store's, even
	// when pgx reports it as a network timeout.
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return inboxdriver.ClassOther
	}
	var netErr net.Error
	switch {
	case
		errors.Is(err, pgconn.ErrConnClosed),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.As(err, &netErr),
		pgconn.SafeToRetry(err):
		return inboxdriver.ClassUnavailable
	}
	return inboxdriver.ClassOther
}

// classifyCode classifies a server error by its SQLSTATE.
func classifyCode(code string) inboxdriver.ErrorClass {
	switch {
	case code == "40001", code == "40P01":
		return inboxdriver.ClassConflict
	case code == "55P03":
		return inboxdriver.ClassLockTimeout
	case code == "42501":
		return inboxdriver.ClassDenied
	case code == "42P01", code == "42703", code == "3F000": // undefined_table, undefined_column, invalid_schema_name
		return inboxdriver.ClassNotMigrated
	case strings.HasPrefix(code, "08"), // connection exception
		code == "57P01", code == "57P02", code == "57P03", // shutdown, crash, cannot connect now
		code == "53300", // too many connections
		code == "25006": // read-only transaction: a standby, or a primary demoted in a failover
		return inboxdriver.ClassUnavailable
	}
	return inboxdriver.ClassOther
}

// TxBroken implements inboxdriver.Driver: tx's connection is closed (pgx
// closes it when the server ends the session, the network fails, or a
// context ends during a query), or err is the server saying that it cannot
// serve now, or a commit the handler ran itself that was abandoned
// (ErrCommitTimeout). A handler's own io.EOF or net.Error, on a connection
// that is still open, is not the store's.
func (d *Driver) TxBroken(ctx context.Context, tx pgx.Tx, err error) bool {
	if _, ok := tx.(*pipeTx); ok {
		return false // nothing was sent
	}
	if errors.Is(err, ErrCommitTimeout) {
		return true
	}
	// A transaction that the handler ended itself has handed its
	// connection back to the pool, where another caller may hold it now:
	// then only err tells.
	if t, ok := tx.(*poolTx); !ok || !t.ended() {
		if conn := tx.Conn(); conn == nil || conn.IsClosed() {
			return true
		}
	}
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && classifyCode(pgErr.Code) == inboxdriver.ClassUnavailable
}

// PurgeBatch implements inboxdriver.Admin. One statement deletes the inbox
// rows and their effect-ledger entries.
func (d *Driver) PurgeBatch(ctx context.Context, p *inboxdriver.PurgeParams) (int64, error) {
	var n int64
	err := d.pool.QueryRow(ctx, d.q.purge, p.OlderThan.Microseconds(), p.Consumer, p.Limit).Scan(&n)
	return n, err
}

// PurgeCount implements inboxdriver.Admin.
func (d *Driver) PurgeCount(ctx context.Context, p *inboxdriver.PurgeParams) (int64, error) {
	var n int64
	err := d.pool.QueryRow(ctx, d.q.purgeCount, p.OlderThan.Microseconds(), p.Consumer).Scan(&n)
	return n, err
}

// Forget implements inboxdriver.Admin. One statement deletes the inbox row
// and the message's effect-ledger entries.
func (d *Driver) Forget(ctx context.Context, p *inboxdriver.ForgetParams) (bool, error) {
	var n int64
	if err := d.pool.QueryRow(ctx, d.q.forget, p.Consumer, p.ID).Scan(&n); err != nil {
		return false, err
	}
	return n > 0, nil
}

// ForgetCount implements inboxdriver.Admin.
func (d *Driver) ForgetCount(ctx context.Context, p *inboxdriver.ForgetParams) (inboxtype.ForgetCounts, error) {
	var n inboxtype.ForgetCounts
	err := d.pool.QueryRow(ctx, d.q.forgetCount, p.Consumer, p.ID).Scan(&n.InboxRows, &n.Effects)
	return n, err
}

// Stats implements inboxdriver.Admin.
func (d *Driver) Stats(ctx context.Context) (*inboxtype.Stats, error) {
	rows, err := d.pool.Query(ctx, d.q.stats)
	if err != nil {
		return nil, err
	}
	s := &inboxtype.Stats{}
	for rows.Next() {
		var c inboxtype.ConsumerStats
		if err := rows.Scan(&c.Consumer, &c.Rows, &c.Oldest, &c.Newest); err != nil {
			rows.Close()
			return nil, err
		}
		s.Consumers = append(s.Consumers, c)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if err := d.pool.QueryRow(ctx, d.q.tableSize, d.tables.Qualify(inboxdriver.DialectPostgres, d.tables.Inbox)).Scan(&s.TableBytes); err != nil {
		return nil, err
	}
	return s, nil
}

// MigrationTx implements inboxdriver.Admin.
func (d *Driver) MigrationTx(ctx context.Context, fn func(ctx context.Context, q inboxdriver.Querier) error) error {
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer rollback(ctx, tx)
	if err := fn(ctx, querier{tx}); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

type querier struct{ tx pgx.Tx }

func (q querier) Exec(ctx context.Context, sql string, args ...any) error {
	_, err := q.tx.Exec(ctx, sql, args...)
	return err
}

func (q querier) QueryInts(ctx context.Context, sql string, args ...any) ([]int64, error) {
	rows, err := q.tx.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}

// DeadLetter implements inboxdriver.Admin.
func (d *Driver) DeadLetter(ctx context.Context, dl *inboxtype.DeadLetter) error {
	// JSON text, which every query exec mode can send: a map has no text
	// encoding for a parameter of unknown type (QueryExecModeExec, the
	// simple protocol).
	headers, err := encodeHeaders(dl.Headers)
	if err != nil {
		return fmt.Errorf("inboxpgx: dead letter headers: %w", err)
	}
	_, err = d.pool.Exec(ctx, d.q.deadLetter,
		dl.Consumer, dl.DedupKey, dl.MessageID, dl.Transport, dl.Queue,
		dl.Partition, dl.Offset, dl.BrokerID, dl.Key, headers, dl.Payload,
		dl.Reason, dl.Error, dl.Attempts, dl.LastSeen)
	return err
}

// DeadLetters implements inboxdriver.Admin.
func (d *Driver) DeadLetterList(ctx context.Context, p *inboxtype.DeadLetterListParams) ([]*inboxtype.DeadLetter, error) {
	rows, err := d.pool.Query(ctx, d.q.deadLetters, p.Consumer, p.Limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanDeadLetter)
}

// DeadLetterGet implements inboxdriver.Admin.
func (d *Driver) DeadLetterGet(ctx context.Context, id int64) (*inboxtype.DeadLetter, error) {
	rows, err := d.pool.Query(ctx, d.q.deadLetter1, id)
	if err != nil {
		return nil, err
	}
	dl, err := pgx.CollectExactlyOneRow(rows, scanDeadLetter)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("dead letter %d: %w", id, inboxdriver.ErrNotFound)
	}
	return dl, err
}

// DeadLetterDelete implements inboxdriver.Admin.
func (d *Driver) DeadLetterDelete(ctx context.Context, id int64) (bool, error) {
	ct, err := d.pool.Exec(ctx, d.q.deadLetterDelete, id)
	if err != nil {
		return false, err
	}
	return ct.RowsAffected() > 0, nil
}

func scanDeadLetter(row pgx.CollectableRow) (*inboxtype.DeadLetter, error) {
	var dl inboxtype.DeadLetter
	err := row.Scan(&dl.ID, &dl.Consumer, &dl.DedupKey, &dl.MessageID, &dl.Transport, &dl.Queue,
		&dl.Partition, &dl.Offset, &dl.BrokerID, &dl.Key, &dl.Headers, &dl.Payload,
		&dl.Reason, &dl.Error, &dl.Attempts, &dl.FirstSeen, &dl.LastSeen)
	return &dl, err
}
