package inboxmigrate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/txinbox/inbox/inboxdriver"
)

// tables returns the tables that migration version creates, and so that
// its down migration drops.
func (s *schema) tables(version int) []string {
	switch version {
	case 1:
		return []string{s.t.Inbox}
	case 2:
		return []string{s.t.DeadLetters}
	case 3:
		return []string{s.t.Effects}
	case 4:
		return []string{s.t.Takeovers}
	case 6:
		return []string{s.t.Outbox, s.t.OutboxKeys}
	}
	return nil
}

// ErrTablesMissing is returned by Up when the version table records
// migrations whose tables the store lacks: tables migrated under other
// names in the same schema (one version table serves one set of names), or
// dropped by hand. Up then changes nothing.
var ErrTablesMissing = errors.New("tables of applied migrations are missing")

// Missing returns the tables that the applied migrations made and that the
// store lacks, only reading; see ErrTablesMissing. It needs a store that
// reads its catalog (inboxdriver.Catalog), and returns nil for another.
func (m *Migrator) Missing(ctx context.Context) ([]string, error) {
	applied, err := m.Applied(ctx)
	if err != nil {
		return nil, err
	}
	return m.missing(ctx, int64s(applied))
}

// int64s converts Applied's versions to the form the version table's
// queries return.
func int64s(vs []int) []int64 {
	out := make([]int64, len(vs))
	for i, v := range vs {
		out[i] = int64(v)
	}
	return out
}

// CheckTables returns the error Up and Down return when tables of applied
// migrations are missing (wrapping ErrTablesMissing, and naming them), or
// nil when none is, only reading: a tool that meets a missing table says
// the same as the migrator.
func (m *Migrator) CheckTables(ctx context.Context) error {
	applied, err := m.Applied(ctx)
	if err != nil {
		return err
	}
	vs := int64s(applied)
	missing, err := m.missing(ctx, vs)
	if err != nil || len(missing) == 0 {
		return err
	}
	return m.tablesMissingError(vs, missing)
}

// missing returns the tables that the applied migrations made and that do
// not exist, when the store reads its catalog (inboxdriver.Catalog).
func (m *Migrator) missing(ctx context.Context, applied []int64) ([]string, error) {
	cat, ok := m.admin.(inboxdriver.Catalog)
	if !ok {
		return nil, nil
	}
	var out []string
	for _, mg := range migrations {
		if !slices.Contains(applied, int64(mg.version)) {
			continue
		}
		for _, t := range m.s.tables(mg.version) {
			ok, err := cat.TableExists(ctx, t)
			if err != nil {
				return nil, fmt.Errorf("inbox: look for table %s: %w", t, err)
			}
			if !ok {
				out = append(out, t)
			}
		}
	}
	return out, nil
}

func (m *Migrator) tablesMissingError(applied []int64, missing []string) error {
	what := "table " + missing[0] + " does not exist"
	if len(missing) > 1 {
		what = "tables " + strings.Join(missing, ", ") + " do not exist"
	}
	return fmt.Errorf("%w: %s records migrations up to %03d, but %s: one version table serves one set of table names, so migrate other names in a schema of their own",
		ErrTablesMissing, m.s.t.Migrations, slices.Max(applied), what)
}

// Step is one migration that Down would revert, and the rows it would drop.
type Step struct {
	Info
	// Drops are the tables the revert drops, with their rows.
	Drops []TableRows
}

// TableRows is a table and how many rows it holds.
type TableRows struct {
	Table string
	Rows  int64
}

// Plan returns the migrations that Down(ctx, version) would revert, newest
// first, with the tables each drops and the rows they hold now, without
// changing anything: a command shows it before it reverts, and refuses to
// drop rows unless told to. It returns ErrTablesMissing, as Down does, when
// tables of applied migrations are missing.
func (m *Migrator) Plan(ctx context.Context, version int) ([]Step, error) {
	vs, err := m.appliedOrNone(ctx)
	if err != nil {
		return nil, err
	}
	missing, err := m.missing(ctx, vs)
	if err != nil {
		return nil, err
	}
	if len(missing) > 0 {
		return nil, m.tablesMissingError(vs, missing)
	}
	var steps []Step
	for i := len(migrations) - 1; i >= 0; i-- {
		mg := migrations[i]
		if mg.version <= version || !slices.Contains(vs, int64(mg.version)) {
			continue
		}
		st := Step{Info: Info{Version: mg.version, Name: mg.name, Applied: true}}
		for _, t := range m.s.tables(mg.version) {
			var n []int64
			err := m.admin.MigrationTx(ctx, func(ctx context.Context, q inboxdriver.Querier) error {
				var err error
				n, err = q.QueryInts(ctx, `SELECT count(*) FROM `+m.s.table(t))
				return err
			})
			if err != nil {
				return nil, fmt.Errorf("inbox: count the rows of %s: %w", t, err)
			}
			st.Drops = append(st.Drops, TableRows{Table: t, Rows: n[0]})
		}
		steps = append(steps, st)
	}
	return steps, nil
}
