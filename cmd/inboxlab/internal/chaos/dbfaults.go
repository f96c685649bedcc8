package chaos

import (
	"context"
	mrand "math/rand/v2"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/inbox/cmd/inboxlab/internal/dbchaos"
	"github.com/txinbox/inbox/internal/dbfault"
)

// DefaultDBFaults are the database faults a run injects unless
// Config.DBFaults says otherwise: a permission fault (INSERT on the inbox
// revoked) and a read-only database, as after a failover. Both are the
// store's fault, never a message's: no healthy event may be dead-lettered.
var DefaultDBFaults = dbchaos.DefaultKinds

// errNotSuperuser is consumerRole's error when the database user is not a
// superuser.
var errNotSuperuser = dbchaos.ErrNotSuperuser

// consumerRole creates the role the consumers log in as when the run
// injects database faults: the faults revoke its grants and change its
// settings, never the coordinator's. It holds the consumer's grants of
// docs/GRANTS.md and those of the handler's tables, and logs in with a
// random password. close drops it.
func (s *pgStore) consumerRole(ctx context.Context) error {
	role, err := dbchaos.CreateRole(ctx, s.pool, s.url, s.schema+"_consumer", []string{
		`GRANT USAGE ON SCHEMA ` + pgx.Identifier{s.schema}.Sanitize() + ``,
		`GRANT SELECT, INSERT ON ` + s.table("inbox") + ``,
		`GRANT SELECT, INSERT, UPDATE (reason, error_text, attempts, last_seen_at) ON ` + s.table("inbox_dead_letters") + ``,
		`GRANT SELECT, INSERT, UPDATE ON ` + s.table("inbox_effects") + ``,
		`GRANT SELECT, INSERT, UPDATE, DELETE ON ` + s.table("inbox_takeovers") + ``,
		`GRANT SELECT, UPDATE ON ` + s.table("accounts") + ``,
		`GRANT INSERT ON ` + s.table("effects") + ``,
	})
	if err != nil {
		return err
	}
	s.role, s.database, s.consumerURL = role.Name, role.Database, role.URL
	return nil
}

// dropRole drops the consumers' role, after its sessions.
func (s *pgStore) dropRole(ctx context.Context) error {
	if s.role == "" {
		return nil
	}
	return dbchaos.DropRole(ctx, s.pool, s.role)
}

// injectDBFaults injects the run's database faults, one at a time and in
// turn, until ctx is done, and counts each in res. A fault that cannot be
// injected is a problem of the run. Every fault is restored before it
// returns.
func injectDBFaults(ctx context.Context, cfg *Config, s *pgStore, r *mrand.Rand, count func(func(*Result))) {
	if len(cfg.DBFaults) == 0 {
		return
	}
	sched := &dbchaos.Schedule{
		Kinds: cfg.DBFaults,
		Role:  &dbchaos.Role{Name: s.role, Database: s.database, URL: s.consumerURL},
		Pool:  s.pool,
		Table: func(int, dbfault.Kind) string { return s.table("inbox") },
		Log:   cfg.Log, Prefix: "chaos",
		Injected: func(kind dbfault.Kind) { count(func(res *Result) { res.DBFaults[string(kind)]++ }) },
		Failed: func(err error) {
			count(func(res *Result) { res.Problems = append(res.Problems, err.Error()) })
		},
	}
	sched.Run(ctx, r)
}
