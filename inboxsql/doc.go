// Package inboxsql is the inbox's store over database/sql, with one dialect
// per engine: SQLite (modernc.org/sqlite, pure Go: the embedded default),
// Postgres (pgx's stdlib), and MySQL or MariaDB (go-sql-driver/mysql).
// Handlers receive the *sql.Tx of the message's transaction.
//
// This package needs only the standard library. Each engine lives in a
// package, and a module, of its own, which registers its database/sql
// driver: a program links, and registers, only the engines it imports.
//
//	db, err := inboxsqlite.Open("inbox.db")
//	if err != nil { ... }
//	d, err := inboxsql.New(db, inboxsqlite.Engine, nil)
//	if err != nil { ... }
//	m, err := inboxmigrate.New(d)
//	if err != nil { ... }
//	if _, err := m.Up(ctx); err != nil { ... }
//	client, err := inbox.NewClient(d, nil)
//	if err != nil { ... }
//	outcome, err := client.Process(ctx, "billing", msg, inbox.HandlerFunc[*sql.Tx](
//		func(ctx context.Context, tx *sql.Tx, m inbox.Message) error {
//			_, err := tx.ExecContext(ctx, `UPDATE accounts SET balance_cents = balance_cents + ? WHERE id = ?`, 100, "acct-1")
//			return err
//		}))
//
// The tables come from package inboxmigrate, rendered for the dialect.
//
// # Opening the database
//
//   - SQLite: inboxsqlite.Open (see below) and inboxsqlite.Engine.
//     Package inboxsqlite registers modernc.org/sqlite as "sqlite".
//   - Postgres: inboxpostgres.Open(url), or stdlib.OpenDBFromPool over a
//     pgx pool, and inboxpostgres.Engine. Package inboxpgx is the primary
//     Postgres store: it sends the claim with the BEGIN in one round trip.
//     Use this one where the application already speaks database/sql.
//   - MySQL or MariaDB: sql.Open("mysql", dsn), with package inboxmysql
//     imported, which registers go-sql-driver/mysql. Pass
//     inboxmysql.MariaDB for a MariaDB server (10.5 or later),
//     inboxmysql.MySQL otherwise. Times are stored in DATETIME(6) columns in
//     UTC, and sent and read as text, so the DSN's parseTime and loc and
//     the session's time_zone do not move them. The server must run in a
//     strict sql_mode (the default since MySQL 5.7 and MariaDB 10.2.4).
//
// # Claims
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
// # Concurrent duplicates
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
//
// # SQLite
//
// inboxsqlite.Open opens a database file the way this store expects: WAL mode,
// so that readers do not block the writer; a busy timeout, so that a writer
// waits for the write lock instead of failing at once; synchronous=FULL,
// so that a commit is durable before the message is acked; and BEGIN
// IMMEDIATE for every read-write transaction, so that a transaction takes
// the write lock at its start. A transaction that began DEFERRED, read, and
// then tried to write would fail with SQLITE_BUSY_SNAPSHOT without waiting,
// whenever another connection wrote in between. If you open the database
// yourself, use the same settings.
//
// SQLite has no advisory locks. The lock that picks one cleaner
// (inbox.Client.RunCleaner) is held within the Driver's process only; two
// processes may each purge at once, which is harmless: every purge batch is
// a short write transaction, and the write lock serialises them. Migrations
// run inside one BEGIN IMMEDIATE transaction, which excludes every other
// migrator, in any process.
//
// # Effects ledger
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
// inbox.Client.ResolveEffect, an operator's write, waits for the write lock
// like any other writer.
//
// # Outbox
//
// The Driver keeps the producer's outbox (package outbox): it implements
// inboxdriver.OutboxStore. An enqueue is one multi-row INSERT (up to 1,000
// events a statement), in ordered mode after one upsert of the keys'
// sequences (on MySQL, an upsert and a locking read). A relay's claim is a
// short transaction: FOR UPDATE SKIP LOCKED on Postgres, MySQL and
// MariaDB (at read committed on MySQL, whose gap locks would otherwise
// deadlock two claims), and the write lock on SQLite, which serialises
// claims. Any number of relays may run on each engine.
//
// # Errors
//
// [Driver.Classify] maps the engine's errors for the client:
// serialization failures, deadlocks and SQLITE_BUSY are conflicts, retried
// from the claim; lock-wait timeouts are inbox.ErrLockTimeout; a broken
// connection, a server shutting down, read-only, or refusing connections
// (whatever the reason it gives: MySQL 1044, 1045, 1049; a Postgres
// SQLSTATE in a connect error), and an unreadable SQLite file are
// inbox.ErrUnavailable, never a reason to dead-letter; a missing privilege
// is inbox.ErrPermissionDenied. [Driver.TxBroken] tells a handler's own
// io.EOF or net.Error, which is the message's, from a lost connection.
package inboxsql
