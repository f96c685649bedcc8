package chaos

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/txinbox/inbox/internal/dbfault"
)

// DefaultDBFaults are the database faults a run injects unless
// Config.DBFaults says otherwise: a permission fault (INSERT on the inbox
// revoked) and a read-only database, as after a failover. Both are the
// store's fault, never a message's: no healthy event may be dead-lettered.
var DefaultDBFaults = []dbfault.Kind{dbfault.RevokeInsert, dbfault.ReadOnly}

// The database-fault schedule: a fault every dbFaultEvery on average,
// each held for dbFaultHold.
const (
	dbFaultEvery = 4 * time.Second
	dbFaultHold  = 1500 * time.Millisecond
)

// errNotSuperuser is consumerRole's error when the database user is not a
// superuser.
var errNotSuperuser = errors.New("chaos: database faults need a superuser in --database-url, to create the consumers' role and revoke its grants; run without them otherwise (--db-faults none; Config.DBFaults empty)")

// consumerRole creates the role the consumers log in as when the run
// injects database faults: the faults revoke its grants and change its
// settings, never the coordinator's. It holds the consumer's grants of
// docs/GRANTS.md and those of the handler's tables, and logs in with a
// random password. close drops it.
func (s *pgStore) consumerRole(ctx context.Context) error {
	var super bool
	if err := s.pool.QueryRow(ctx, `SELECT rolsuper FROM pg_roles WHERE rolname = current_user`).Scan(&super); err != nil {
		return fmt.Errorf("chaos: database faults: %w", err)
	}
	if !super {
		return errNotSuperuser
	}
	if err := s.pool.QueryRow(ctx, `SELECT current_database()`).Scan(&s.database); err != nil {
		return fmt.Errorf("chaos: database faults: %w", err)
	}
	var pw [16]byte
	_, _ = rand.Read(pw[:])
	password := hex.EncodeToString(pw[:])
	s.role = s.schema + "_consumer"
	r := pgx.Identifier{s.role}.Sanitize()
	schema := pgx.Identifier{s.schema}.Sanitize()
	for _, stmt := range []string{
		`CREATE ROLE ` + r + ` LOGIN PASSWORD '` + password + `'`,
		`GRANT CONNECT ON DATABASE ` + pgx.Identifier{s.database}.Sanitize() + ` TO ` + r,
		`GRANT USAGE ON SCHEMA ` + schema + ` TO ` + r,
		`GRANT SELECT, INSERT ON ` + s.table("inbox") + ` TO ` + r,
		`GRANT SELECT, INSERT, UPDATE (reason, error_text, attempts, last_seen_at) ON ` + s.table("inbox_dead_letters") + ` TO ` + r,
		`GRANT SELECT, INSERT, UPDATE ON ` + s.table("inbox_effects") + ` TO ` + r,
		`GRANT SELECT, INSERT, UPDATE, DELETE ON ` + s.table("inbox_takeovers") + ` TO ` + r,
		`GRANT SELECT, UPDATE ON ` + s.table("accounts") + ` TO ` + r,
		`GRANT INSERT ON ` + s.table("effects") + ` TO ` + r,
	} {
		if _, err := s.pool.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("chaos: create the consumers' role: %w", err)
		}
	}
	u, err := url.Parse(s.url)
	if err != nil {
		return fmt.Errorf("chaos: --database-url: %w", err)
	}
	u.User = url.UserPassword(s.role, password)
	s.consumerURL = u.String()
	return nil
}

// dropRole drops the consumers' role, after its sessions.
func (s *pgStore) dropRole(ctx context.Context) {
	if s.role == "" {
		return
	}
	r := pgx.Identifier{s.role}.Sanitize()
	_, _ = s.pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1`, s.role)
	_, _ = s.pool.Exec(ctx, `DROP OWNED BY `+r)
	_, _ = s.pool.Exec(ctx, `DROP ROLE `+r)
}

// injectDBFaults injects the run's database faults, one at a time and in
// turn, until ctx is done, and counts each in res. A fault that cannot be
// injected is a problem of the run. Every fault is restored before it
// returns.
func injectDBFaults(ctx context.Context, cfg *Config, s *pgStore, r *mrand.Rand, count func(func(*Result))) {
	if len(cfg.DBFaults) == 0 {
		return
	}
	admin := stdlib.OpenDBFromPool(s.pool)
	defer admin.Close()
	for i := 0; ; i++ {
		if !sleepCtx(ctx, jitter(r, dbFaultEvery)) {
			return
		}
		kind := cfg.DBFaults[i%len(cfg.DBFaults)]
		if err := holdDBFault(ctx, cfg, admin, s, kind); err != nil {
			count(func(res *Result) { res.Problems = append(res.Problems, err.Error()) })
			continue
		}
		count(func(res *Result) { res.DBFaults[string(kind)]++ })
	}
}

// holdDBFault injects one fault for dbFaultHold, or until ctx is done,
// and restores the database.
func holdDBFault(ctx context.Context, cfg *Config, admin *sql.DB, s *pgStore, kind dbfault.Kind) error {
	// The fault starts and is restored on a context of its own: the end of
	// the chaos phase (ctx) only cuts its hold short. Cut halfway, a start
	// would fail the run for nothing, or leave a grant revoked that
	// nothing restores.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	f, err := dbfault.Start(fctx, kind, dbfault.Target{
		Admin: admin, Database: s.database, Role: s.role, Inbox: s.table("inbox"),
	})
	if err != nil {
		return fmt.Errorf("chaos: database fault %s: %w", kind, err)
	}
	fmt.Fprintf(cfg.Log, "chaos: database fault %s\n", kind)
	sleepCtx(ctx, dbFaultHold)
	if err := f.Stop(fctx); err != nil {
		return fmt.Errorf("chaos: restore after the database fault %s: %w", kind, err)
	}
	return nil
}

// sleepCtx waits for d, and reports false if ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
