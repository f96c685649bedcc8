// Package dbchaos is the database half of the chaos runs, shared by
// 'inboxlab chaos' and 'inboxlab chaos --outbox': the role that a run's processes
// log in as, the schedule of database faults (package internal/dbfault)
// that act on it, and the termination of its sessions.
package dbchaos

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/txinbox/inbox/internal/dbfault"
	"github.com/txinbox/inbox/internal/transportkit"
)

// DefaultKinds are the database faults a run injects by default: a
// permission fault (INSERT revoked) and a read-only database, as after a
// failover. Both are the store's fault, never a message's.
var DefaultKinds = []dbfault.Kind{dbfault.RevokeInsert, dbfault.ReadOnly}

// The default schedule: a fault every Every on average, each held for
// Hold.
const (
	Every = 4 * time.Second
	Hold  = 1500 * time.Millisecond
)

// ErrNotSuperuser is CreateRole's error when the database user is not a
// superuser.
var ErrNotSuperuser = errors.New("database faults need a superuser in --database-url, to create the run's role and revoke its grants; run without them otherwise (--db-faults none; Config.DBFaults empty)")

// Role is a login role created for a run: its processes log in as it, and
// the faults revoke its grants and change its settings, never the
// coordinator's.
type Role struct {
	// Name is the role; Database the database it connects to; URL the
	// run's database URL with the role's user and password.
	Name, Database, URL string

	pool *pgxpool.Pool
}

// CreateRole creates the role name, with CONNECT on the database of pool
// and the grants (GRANT statements without their "TO role"), logging in
// with a random password, through databaseURL with its user replaced.
// pool must be a superuser's; Drop drops the role.
func CreateRole(ctx context.Context, pool *pgxpool.Pool, databaseURL, name string, grants []string) (*Role, error) {
	var super bool
	if err := pool.QueryRow(ctx, `SELECT rolsuper FROM pg_roles WHERE rolname = current_user`).Scan(&super); err != nil {
		return nil, fmt.Errorf("database faults: %w", err)
	}
	if !super {
		return nil, ErrNotSuperuser
	}
	r := &Role{Name: name, pool: pool}
	if err := pool.QueryRow(ctx, `SELECT current_database()`).Scan(&r.Database); err != nil {
		return nil, fmt.Errorf("database faults: %w", err)
	}
	u, err := url.Parse(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("--database-url: %w", err)
	}
	var pw [16]byte
	_, _ = rand.Read(pw[:])
	password := hex.EncodeToString(pw[:])
	q := pgx.Identifier{name}.Sanitize()
	stmts := []string{
		`CREATE ROLE ` + q + ` LOGIN PASSWORD '` + password + `'`,
		`GRANT CONNECT ON DATABASE ` + pgx.Identifier{r.Database}.Sanitize() + ` TO ` + q,
	}
	for _, g := range grants {
		stmts = append(stmts, g+` TO `+q)
	}
	for i, stmt := range stmts {
		if _, err := pool.Exec(ctx, stmt); err != nil {
			if i > 0 {
				r.Drop(context.WithoutCancel(ctx))
			}
			return nil, fmt.Errorf("create the role %s: %w", name, err)
		}
	}
	u.User = url.UserPassword(name, password)
	r.URL = u.String()
	return r, nil
}

// Drop drops the role, after its sessions.
func (r *Role) Drop(ctx context.Context) error {
	if r == nil {
		return nil
	}
	return DropRole(ctx, r.pool, r.Name)
}

// DropRole drops the role name with a superuser's pool, after its
// sessions, and returns the error of the DROP ROLE.
func DropRole(ctx context.Context, pool *pgxpool.Pool, name string) error {
	q := pgx.Identifier{name}.Sanitize()
	_, _ = pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1`, name)
	_, _ = pool.Exec(ctx, `DROP OWNED BY `+q)
	_, err := pool.Exec(ctx, `DROP ROLE `+q)
	return err
}

// Terminate terminates between one and all of the role's sessions, chosen
// with rng, and returns how many it terminated.
func (r *Role) Terminate(ctx context.Context, rng *mrand.Rand) (int, error) {
	rows, err := r.pool.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE usename = $1 AND datname = $2`, r.Name, r.Database)
	if err != nil {
		return 0, err
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil || len(pids) == 0 {
		return 0, err
	}
	rng.Shuffle(len(pids), func(i, j int) { pids[i], pids[j] = pids[j], pids[i] })
	var n int
	for _, pid := range pids[:1+rng.IntN(len(pids))] {
		var ok bool
		if err := r.pool.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, pid).Scan(&ok); err != nil {
			return n, err
		}
		if ok {
			n++
		}
	}
	return n, nil
}

// Schedule injects database faults on a role, one at a time and in turn.
type Schedule struct {
	// Kinds are the faults, injected in this order, again and again.
	Kinds []dbfault.Kind
	// Role is the role they act on, and Pool a superuser's pool on its
	// database, which injects them.
	Role *Role
	Pool *pgxpool.Pool
	// Table returns the table (quoted, qualified) that the i-th fault, of
	// kind k, acts on where its kind acts on one (revoke-insert,
	// table-lock).
	Table func(i int, k dbfault.Kind) string
	// Every is the mean time between faults (a fault comes after between
	// half and one and a half of it), and Hold how long each is held.
	// Default to the package's Every and Hold.
	Every, Hold time.Duration
	// Log receives a line per fault, prefixed with Prefix.
	Log    io.Writer
	Prefix string
	// Injected is called after each fault was restored, Failed for each
	// fault that could not be injected or restored.
	Injected func(k dbfault.Kind)
	Failed   func(err error)
}

// Run injects the faults until ctx is done. Every fault is restored
// before it returns.
func (s *Schedule) Run(ctx context.Context, rng *mrand.Rand) {
	if len(s.Kinds) == 0 {
		return
	}
	every, hold := s.Every, s.Hold
	if every <= 0 {
		every = Every
	}
	if hold <= 0 {
		hold = Hold
	}
	admin := stdlib.OpenDBFromPool(s.Pool)
	defer admin.Close()
	for i := 0; ; i++ {
		if !transportkit.Sleep(ctx, Jitter(rng, every)) {
			return
		}
		kind := s.Kinds[i%len(s.Kinds)]
		if err := s.hold(ctx, admin, i, kind, hold); err != nil {
			s.Failed(err)
			continue
		}
		s.Injected(kind)
	}
}

// hold injects one fault for hold, or until ctx is done, and restores the
// database.
func (s *Schedule) hold(ctx context.Context, admin *sql.DB, i int, kind dbfault.Kind, hold time.Duration) error {
	// The fault starts and is restored on a context of its own: the end of
	// the chaos phase (ctx) only cuts its hold short. Cut halfway, a start
	// would fail the run for nothing, or leave a grant revoked that
	// nothing restores.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	table := s.Table(i, kind)
	f, err := dbfault.Start(fctx, kind, dbfault.Target{
		Admin: admin, Database: s.Role.Database, Role: s.Role.Name, Inbox: table,
	})
	if err != nil {
		return fmt.Errorf("%s: database fault %s: %w", s.Prefix, kind, err)
	}
	if s.Log != nil {
		on := ""
		if kind == dbfault.RevokeInsert || kind == dbfault.TableLock {
			on = " on " + table
		}
		fmt.Fprintf(s.Log, "%s: database fault %s%s\n", s.Prefix, kind, on)
	}
	transportkit.Sleep(ctx, hold)
	if err := f.Stop(fctx); err != nil {
		return fmt.Errorf("%s: restore after the database fault %s: %w", s.Prefix, kind, err)
	}
	return nil
}

// Jitter returns a duration between half and one and a half of d.
func Jitter(r *mrand.Rand, d time.Duration) time.Duration {
	return d/2 + time.Duration(r.Int64N(int64(d)))
}
