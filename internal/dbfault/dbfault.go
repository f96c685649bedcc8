// Package dbfault makes a Postgres database fail for the consumers of an
// inbox, the way databases fail in production: their sessions terminated,
// the inbox locked, CONNECT revoked, INSERT on the inbox revoked, the
// database read-only after a failover. The outage tests of inboxkafka and
// inboxsqs and `inboxlab chaos --db-faults` inject them; each restores what it
// changed when it stops.
//
// Every fault acts on one role, which the consumers log in as: never on the
// superuser that injects it, nor on other roles of the server. It needs
// only the standard library: the caller opens Target.Admin with a
// database/sql driver of its choice.
package dbfault

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Kind is a kind of database fault.
type Kind string

// The kinds of fault.
const (
	// TerminateBackends terminates every session of the role, again and
	// again (pg_terminate_backend), as a database restart or a proxy that
	// drops connections does.
	TerminateBackends Kind = "terminate-backends"
	// TableLock holds an ACCESS EXCLUSIVE lock on the inbox, as a
	// migration or a VACUUM FULL does: every claim waits.
	TableLock Kind = "table-lock"
	// RevokeConnect revokes the role's CONNECT on the database and
	// terminates its sessions: every new connection is refused with
	// SQLSTATE 42501.
	RevokeConnect Kind = "revoke-connect"
	// RevokeConnectOneAlive is RevokeConnect that leaves the role's oldest
	// session alive: some transactions succeed on it while every new
	// connection is refused.
	RevokeConnectOneAlive Kind = "revoke-connect-one-alive"
	// RevokeInsert revokes the role's INSERT on the inbox: every claim
	// fails with SQLSTATE 42501.
	RevokeInsert Kind = "revoke-insert"
	// ReadOnly sets default_transaction_read_only for the role (ALTER
	// ROLE … SET) and terminates its sessions: the new ones are read-only,
	// as after a failover to a standby, and every claim fails with
	// SQLSTATE 25006. Only the role is affected.
	ReadOnly Kind = "read-only"
)

// Kinds lists every kind of fault.
var Kinds = []Kind{TerminateBackends, TableLock, RevokeConnect, RevokeConnectOneAlive, RevokeInsert, ReadOnly}

// ParseKinds parses a comma-separated list of kinds; "all" is every kind.
func ParseKinds(list string) ([]Kind, error) {
	if strings.TrimSpace(list) == "all" {
		return Kinds, nil
	}
	var out []Kind
	for _, s := range strings.Split(list, ",") {
		k := Kind(strings.TrimSpace(s))
		found := false
		for _, known := range Kinds {
			found = found || known == k
		}
		if !found {
			names := make([]string, len(Kinds))
			for i, k := range Kinds {
				names[i] = string(k)
			}
			return nil, fmt.Errorf("dbfault: unknown fault %q: want all, or a list of %s", k, strings.Join(names, ", "))
		}
		out = append(out, k)
	}
	return out, nil
}

// Target is what a fault acts on.
type Target struct {
	// Admin is a superuser's connection to Database. It is used to inject
	// and restore the fault, and is never the role's.
	Admin *sql.DB
	// Database is the database the consumers connect to.
	Database string
	// Role is the role the consumers log in as. It must not be a
	// superuser, and, for RevokeConnect, must not hold CONNECT through
	// PUBLIC: revoke that first.
	Role string
	// Inbox is the inbox table, quoted and qualified.
	Inbox string
	// TerminateEvery is the interval of TerminateBackends. Defaults to
	// 100ms.
	TerminateEvery time.Duration
}

// Fault is a fault in progress.
type Fault struct {
	Kind Kind

	mu         sync.Mutex
	terminated int64 // sessions the fault terminated
	stop       func(ctx context.Context) error
	stopped    bool
	stopErr    error
}

// Terminated returns how many of the role's sessions the fault has
// terminated so far.
func (f *Fault) Terminated() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.terminated
}

// Stop ends the fault and restores everything it changed. It is safe to
// call more than once, and from a test's cleanup, whether or not the test
// already stopped it: only the first call acts.
func (f *Fault) Stop(ctx context.Context) error {
	f.mu.Lock()
	if f.stopped {
		err := f.stopErr
		f.mu.Unlock()
		return err
	}
	f.stopped = true
	stop := f.stop
	f.mu.Unlock()
	err := stop(ctx)
	f.mu.Lock()
	f.stopErr = err
	f.mu.Unlock()
	return err
}

func (f *Fault) count(n int64) {
	f.mu.Lock()
	f.terminated += n
	f.mu.Unlock()
}

// Start injects a fault of kind k on t. On error nothing is left changed.
func Start(ctx context.Context, k Kind, t Target) (*Fault, error) {
	if t.Admin == nil || t.Role == "" || t.Database == "" || t.Inbox == "" {
		return nil, errors.New("dbfault: Target needs Admin, Database, Role and Inbox")
	}
	var super bool
	if err := t.Admin.QueryRowContext(ctx, `SELECT rolsuper FROM pg_roles WHERE rolname = $1`, t.Role).Scan(&super); err != nil {
		return nil, fmt.Errorf("dbfault: role %q: %w", t.Role, err)
	}
	if super {
		return nil, fmt.Errorf("dbfault: role %q is a superuser, whom no grant or setting stops: run the consumers as a role of their own", t.Role)
	}
	f := &Fault{Kind: k}
	role := quote(t.Role)
	switch k {
	case TerminateBackends:
		every := t.TerminateEvery
		if every <= 0 {
			every = 100 * time.Millisecond
		}
		done := make(chan struct{})
		finished := make(chan struct{})
		go func() {
			defer close(finished)
			tick := time.NewTicker(every)
			defer tick.Stop()
			for {
				n, _ := terminate(ctx, t, false)
				f.count(n)
				select {
				case <-done:
					return
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		}()
		f.stop = func(context.Context) error {
			close(done)
			<-finished
			return nil
		}
	case TableLock:
		conn, err := t.Admin.Conn(ctx)
		if err != nil {
			return nil, fmt.Errorf("dbfault: table-lock: %w", err)
		}
		tx, err := conn.BeginTx(ctx, nil)
		if err == nil {
			_, err = tx.ExecContext(ctx, `LOCK TABLE `+t.Inbox+` IN ACCESS EXCLUSIVE MODE`)
			if err != nil {
				_ = tx.Rollback()
			}
		}
		if err != nil {
			conn.Close()
			return nil, fmt.Errorf("dbfault: table-lock %s: %w", t.Inbox, err)
		}
		f.stop = func(context.Context) error {
			err := tx.Rollback()
			return errors.Join(err, conn.Close())
		}
	case RevokeConnect, RevokeConnectOneAlive:
		db := quote(t.Database)
		if err := exec(ctx, t.Admin, `REVOKE CONNECT ON DATABASE `+db+` FROM `+role); err != nil {
			return nil, err
		}
		grant := func(ctx context.Context) error {
			return exec(ctx, t.Admin, `GRANT CONNECT ON DATABASE `+db+` TO `+role)
		}
		var still bool
		if err := t.Admin.QueryRowContext(ctx, `SELECT has_database_privilege($1, $2, 'CONNECT')`, t.Role, t.Database).Scan(&still); err != nil || still {
			return nil, errors.Join(grant(ctx), err, fmt.Errorf("dbfault: %s: role %q still has CONNECT on %q, through PUBLIC: REVOKE CONNECT ON DATABASE %s FROM PUBLIC first", k, t.Role, t.Database, db))
		}
		n, err := terminate(ctx, t, k == RevokeConnectOneAlive)
		f.count(n)
		if err != nil {
			return nil, errors.Join(err, grant(ctx))
		}
		f.stop = grant
	case RevokeInsert:
		if err := exec(ctx, t.Admin, `REVOKE INSERT ON `+t.Inbox+` FROM `+role); err != nil {
			return nil, err
		}
		f.stop = func(ctx context.Context) error {
			return exec(ctx, t.Admin, `GRANT INSERT ON `+t.Inbox+` TO `+role)
		}
	case ReadOnly:
		db := quote(t.Database)
		set := `ALTER ROLE ` + role + ` IN DATABASE ` + db + ` SET default_transaction_read_only = on`
		reset := `ALTER ROLE ` + role + ` IN DATABASE ` + db + ` RESET default_transaction_read_only`
		if err := exec(ctx, t.Admin, set); err != nil {
			return nil, err
		}
		n, err := terminate(ctx, t, false)
		f.count(n)
		if err != nil {
			return nil, errors.Join(err, exec(ctx, t.Admin, reset))
		}
		f.stop = func(ctx context.Context) error {
			if err := exec(ctx, t.Admin, reset); err != nil {
				return err
			}
			// The sessions opened meanwhile stay read-only until they
			// end.
			n, err := terminate(ctx, t, false)
			f.count(n)
			return err
		}
	default:
		return nil, fmt.Errorf("dbfault: unknown fault %q", k)
	}
	return f, nil
}

// terminate terminates the role's sessions on the database, all of them
// or all but the oldest, and returns how many.
func terminate(ctx context.Context, t Target, keepOldest bool) (int64, error) {
	keep := ""
	if keepOldest {
		keep = ` AND pid <> (SELECT pid FROM pg_stat_activity WHERE usename = $1 AND datname = $2 ORDER BY backend_start LIMIT 1)`
	}
	var n int64
	err := t.Admin.QueryRowContext(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
 WHERE usename = $1 AND datname = $2 AND pid <> pg_backend_pid()`+keep, t.Role, t.Database).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("dbfault: terminate the sessions of %q: %w", t.Role, err)
	}
	return n, nil
}

func exec(ctx context.Context, db *sql.DB, stmt string) error {
	if _, err := db.ExecContext(ctx, stmt); err != nil {
		return fmt.Errorf("dbfault: %s: %w", stmt, err)
	}
	return nil
}

// quote quotes a Postgres identifier.
func quote(name string) string { return `"` + strings.ReplaceAll(name, `"`, `""`) + `"` }
