package inboxsql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxtype"
)

var _ inboxdriver.EffectStore = (*Driver)(nil)

// The effects ledger.
//
// The Driver keeps the ledger of inbox.Client.Effect (it implements
// inboxdriver.EffectStore) in the table that inboxmigrate creates beside
// the inbox, Tables.Effects. Each ledger write is its own short statement
// or transaction, committed outside the message's transaction, so it
// survives that transaction's rollback; it runs on another connection of
// the pool, so give the pool more connections than the handlers that run
// at once. A step seen before is locked while it is read and restarted:
// SELECT … FOR UPDATE on Postgres and MySQL, the write lock on SQLite.
// [Driver.PurgeBatch] deletes the ledger entries of the messages it
// purges, and [Driver.Forget] those of the message it forgets.
//
// On Postgres, MySQL and MariaDB that is all. SQLite has one writer per
// database file, and a message's transaction holds the write lock from its
// claim until it ends, so a ledger write made from the handler, in the same
// file, waits for a lock that its own caller holds. It cannot succeed: it
// would wait until the busy timeout and fail with SQLITE_BUSY, which the
// client takes for a conflict and retries, waiting again each time; with a
// pool of one connection, which the handler's transaction holds, it would
// wait for a connection for as long as its context lets it.
//
// So on SQLite, give the ledger a database file of its own with
// Config.EffectsDB. Open it with inboxsqlite.Open and migrate it like the inbox's:
// it is a store of its own, of which only the ledger table is used. Point
// the inbox command at it to list stuck steps (inbox stats).
//
//	db, err := inboxsqlite.Open("inbox.db")
//	if err != nil { ... }
//	effects, err := inboxsqlite.Open("inbox-effects.db")
//	if err != nil { ... }
//	ld, err := inboxsql.New(effects, inboxsqlite.Engine, nil)
//	if err != nil { ... }
//	// Migrate ld with inboxmigrate, as d.
//	d, err := inboxsql.New(db, inboxsqlite.Engine, &inboxsql.Config{EffectsDB: effects})
//
// The ledger's writes then take the other file's write lock, which no
// message transaction holds. The two files do not commit together:
// PurgeBatch and Forget delete the ledger entries first, then the inbox
// rows, so a crash in between leaves inbox rows whose entries are gone.
// Those messages are still Duplicates, and the next purge, or Forget run
// again, deletes the rows.
//
// Without Config.EffectsDB, the default, the ledger is in the inbox's file,
// and a ledger write of Effect fails at once with [ErrLedgerLocked] while a
// message transaction that this Driver began is open: always inside a
// handler of Process or ProcessBatch, and also when Effect is called
// outside a handler while another goroutine's message is in flight. There
// Effect works only while no message transaction is open, such as before
// the transaction that the caller runs with ClaimTx. ErrLedgerLocked is
// retryable, and a failure of the inbox's own work (the ledger), so never
// the message's: a transport adapter pauses and retries it, and logs the
// outage, until the ledger has a file of its own. The Driver cannot see a transaction that the caller began for
// ClaimTx: Effect inside one waits for the busy timeout and fails with a
// conflict whose message says why, or, with a pool of one connection,
// fails with ErrLedgerLocked when no connection has freed up within
// DefaultSQLiteBusyTimeout.
//
// inbox.Admin.EffectResolve, an operator's write, waits for the write lock
// like any other writer.

// ErrLedgerLocked is returned, on SQLite with the effects ledger in the
// inbox's own database file (Config.EffectsDB nil), by the ledger writes of
// inbox.Client.Effect while a message transaction of this Driver is open,
// as one always is while a handler runs. SQLite has one writer per file,
// and that transaction holds the write lock until the handler returns: the
// ledger write could only wait for it until the busy timeout, and with a
// pool of one connection forever. It fails at once instead. It is also
// returned when no connection of the pool frees up for a ledger write
// within DefaultSQLiteBusyTimeout. Give the ledger a file of its own with
// Config.EffectsDB.
var ErrLedgerLocked = errors.New("inboxsql: SQLite's write lock is held by an open message transaction, so the effects ledger in the same file cannot be written: set Config.EffectsDB to give the ledger a file of its own")

// maxBeginTries bounds the rounds of EffectBegin when the entry it found
// is deleted (Forget, Purge) before it could lock it.
const maxBeginTries = 3

// ledgerDB is what *sql.DB and *sql.Conn share, for the ledger.
type ledgerDB interface {
	execQuerier
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// ledgerWriter returns where a ledger write of Client.Effect runs, and a
// func that releases it. On SQLite with the ledger in the inbox's own file
// it fails fast with ErrLedgerLocked while a message transaction is open,
// and it bounds the wait for a connection, which a pool of one connection
// held by the caller's transaction would never give.
func (d *Driver) ledgerWriter(ctx context.Context) (ledgerDB, func(), error) {
	if d.dialect != SQLite || d.effectsDB != nil {
		return d.EffectsDB(), func() {}, nil
	}
	if n := d.openN.Load(); n > 0 {
		return nil, nil, fmt.Errorf("%w (inside a handler, Client.Effect on SQLite needs Config.EffectsDB)", ErrLedgerLocked)
	}
	wctx, cancel := context.WithTimeout(ctx, DefaultSQLiteBusyTimeout)
	defer cancel()
	conn, err := d.db.Conn(wctx)
	if err != nil {
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			return nil, nil, fmt.Errorf("%w: no connection of the pool (%d open, %d in use) was free for the ledger within %v",
				ErrLedgerLocked, d.db.Stats().OpenConnections, d.db.Stats().InUse, DefaultSQLiteBusyTimeout)
		}
		return nil, nil, err
	}
	return conn, func() { _ = conn.Close() }, nil
}

// ledgerErr explains a busy error of a ledger write on SQLite with the
// ledger in the inbox's own file: a transaction the Driver did not begin,
// such as the caller's around ClaimTx, may hold the write lock for good.
// The error keeps its class (a conflict).
func (d *Driver) ledgerErr(err error) error {
	if err == nil || d.dialect != SQLite || d.effectsDB != nil {
		return err
	}
	if code, ok := sqliteCode(err); ok && code&0xff == sqliteBusy {
		return fmt.Errorf("inboxsql: the effects ledger waited for SQLite's write lock until the busy timeout; "+
			"if the caller holds a write transaction on the same file, as around ClaimTx, the lock never frees: "+
			"set Config.EffectsDB to give the ledger a file of its own: %w", err)
	}
	return err
}

// EffectBegin implements inboxdriver.EffectStore. A new step costs one
// INSERT; a step seen before is locked (FOR UPDATE, or SQLite's write
// lock), read and, if it may start again, updated in one short
// transaction.
func (d *Driver) EffectBegin(ctx context.Context, p *inboxdriver.EffectBeginParams) (*inboxtype.EffectEntry, bool, error) {
	db, release, err := d.ledgerWriter(ctx)
	if err != nil {
		return nil, false, err
	}
	defer release()
	for range maxBeginTries {
		inserted, err := d.effectInsert(ctx, db, p)
		if err != nil {
			return nil, false, d.ledgerErr(err)
		}
		if inserted {
			return &inboxtype.EffectEntry{
				Consumer: p.Consumer, MessageID: p.ID, Step: p.Step,
				State: inboxtype.EffectStarted, Attempts: 1, StartedAt: p.Now,
			}, true, nil
		}
		e, started, err := d.effectRestart(ctx, db, p)
		if err != nil {
			return nil, false, d.ledgerErr(err)
		}
		if e != nil {
			return e, started, nil
		}
		// The entry was deleted after the INSERT found it: insert again.
	}
	return nil, false, fmt.Errorf("inboxsql: effect %s/%s/%s: the ledger entry was deleted %d times while it was being begun",
		p.Consumer, p.ID, p.Step, maxBeginTries)
}

// effectInsert inserts a new started entry, and reports false when the
// entry exists.
func (d *Driver) effectInsert(ctx context.Context, db ledgerDB, p *inboxdriver.EffectBeginParams) (bool, error) {
	res, err := db.ExecContext(ctx, d.q.effectInsert, p.Consumer, p.ID, p.Step, d.timeArg(p.Now))
	if d.dialect.mysql() && d.engine.DuplicateKey(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// effectRestart locks and reads an existing entry and restarts it if it may
// be called again. It returns a nil entry when there is none.
func (d *Driver) effectRestart(ctx context.Context, db ledgerDB, p *inboxdriver.EffectBeginParams) (*inboxtype.EffectEntry, bool, error) {
	var (
		e       *inboxtype.EffectEntry
		started bool
	)
	err := inTx(ctx, db, func(tx *sql.Tx) error {
		var err error
		e, err = d.scanEffect(tx.QueryRowContext(ctx, d.q.effectGet, p.Consumer, p.ID, p.Step))
		if errors.Is(err, sql.ErrNoRows) {
			e = nil
			return nil
		}
		if err != nil {
			return err
		}
		started = e.State == inboxtype.EffectFailed || (e.State == inboxtype.EffectStarted && p.RetryStarted)
		if !started {
			return nil
		}
		if _, err := tx.ExecContext(ctx, d.q.effectRestart, d.timeArg(p.Now), p.Consumer, p.ID, p.Step); err != nil {
			return err
		}
		e.State, e.StartedAt, e.Result, e.DoneAt = inboxtype.EffectStarted, p.Now, nil, time.Time{}
		e.Attempts++
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	return e, started, nil
}

// EffectDone implements inboxdriver.EffectStore.
func (d *Driver) EffectDone(ctx context.Context, p *inboxdriver.EffectDoneParams) (bool, error) {
	return d.effectUpdate(ctx, d.q.effectDone, p.Result, d.timeArg(p.Now), p.Consumer, p.ID, p.Step)
}

// EffectFailed implements inboxdriver.EffectStore.
func (d *Driver) EffectFailed(ctx context.Context, p *inboxdriver.EffectKeyParams) (bool, error) {
	return d.effectUpdate(ctx, d.q.effectFailed, p.Consumer, p.ID, p.Step)
}

// effectUpdate runs a ledger write of Client.Effect that changes one entry
// in state started, and reports whether it did.
func (d *Driver) effectUpdate(ctx context.Context, query string, args ...any) (bool, error) {
	db, release, err := d.ledgerWriter(ctx)
	if err != nil {
		return false, err
	}
	defer release()
	n, err := execCount(ctx, db, query, args...)
	if err != nil {
		return false, d.ledgerErr(err)
	}
	return n == 1, nil
}

// EffectResolve implements inboxdriver.EffectStore. It is an operator's
// write, made outside any handler: on SQLite it waits for the write lock
// like any other writer.
func (d *Driver) EffectResolve(ctx context.Context, p *inboxdriver.EffectResolveParams) (bool, error) {
	var result, doneAt any
	if p.State == inboxtype.EffectDone {
		result, doneAt = p.Result, d.timeArg(p.Now)
	}
	n, err := execCount(ctx, d.EffectsDB(), d.q.effectResolve, string(p.State), result, doneAt, p.Consumer, p.ID, p.Step)
	if err != nil {
		return false, err
	}
	return n == 1, nil
}

// EffectList implements inboxdriver.EffectStore.
func (d *Driver) EffectList(ctx context.Context, p *inboxtype.EffectListParams) ([]*inboxtype.EffectEntry, error) {
	var before any
	if !p.StartedBefore.IsZero() {
		before = d.timeArg(p.StartedBefore)
	}
	query, args := d.q.effectList(p.Consumer, p.MessageID, string(p.State), before, p.Limit)
	rows, err := d.EffectsDB().QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*inboxtype.EffectEntry
	for rows.Next() {
		e, err := d.scanEffect(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// scanEffect reads the columns of queries.effectCols.
func (d *Driver) scanEffect(row interface{ Scan(dest ...any) error }) (*inboxtype.EffectEntry, error) {
	var (
		e     inboxtype.EffectEntry
		state string
	)
	err := row.Scan(&e.Consumer, &e.MessageID, &e.Step, &state, &e.Result, &e.Attempts,
		d.timeScanner(&e.StartedAt), d.nullTimeScanner(&e.DoneAt))
	if err != nil {
		return nil, err
	}
	e.State = inboxtype.EffectState(state)
	return &e, nil
}
