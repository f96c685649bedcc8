// Package inboxmigrate creates and upgrades the inbox's tables: versioned
// migrations, written by hand for each SQL dialect, with every identifier
// quoted.
//
// Each migration runs in its own transaction together with the row that
// records it, under a store-wide lock, so two processes migrating at once
// apply each migration once. (MySQL commits DDL implicitly, so there a
// migration and its row are not atomic; every statement is written to be
// safe to run again, or is skipped when its change is found in place.)
//
// Teams that run their own migration tool can print the same SQL with
// [Render] for goose or golang-migrate.
package inboxmigrate

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/txinbox/inbox/inboxdriver"
)

// Migrator applies migrations to one store.
type Migrator struct {
	admin Store
	s     *schema
}

// Store is what a migrator needs of a store: every driver (an
// inboxdriver.Admin) has it.
type Store interface {
	Dialect() inboxdriver.Dialect
	Tables() inboxdriver.Tables
	WithMigrationLock(ctx context.Context, fn func(ctx context.Context) error) error
	MigrationTx(ctx context.Context, fn func(ctx context.Context, q inboxdriver.Querier) error) error
}

// New returns a migrator for the store behind admin, such as an
// *inboxpgx.Driver, with its dialect and table names.
func New(admin Store) (*Migrator, error) {
	t := admin.Tables().WithDefaults()
	if err := t.Validate(admin.Dialect()); err != nil {
		return nil, err
	}
	return &Migrator{admin: admin, s: &schema{d: admin.Dialect(), t: t}}, nil
}

// Info describes a migration.
type Info struct {
	Version int
	Name    string
	// Applied reports, in Status, whether the store has it.
	Applied bool
}

// Latest is the version of the newest migration.
func Latest() int { return migrations[len(migrations)-1].version }

// Up migrates store to the latest version: New, then Migrator.Up. It
// returns the migrations it applied.
func Up(ctx context.Context, store Store) ([]Info, error) {
	m, err := New(store)
	if err != nil {
		return nil, err
	}
	return m.Up(ctx)
}

// Up applies every migration the store does not have yet, oldest first, and
// returns those it applied. Running it again applies nothing.
func (m *Migrator) Up(ctx context.Context) ([]Info, error) {
	return m.UpTo(ctx, Latest())
}

// UpTo applies the missing migrations up to and including version.
func (m *Migrator) UpTo(ctx context.Context, version int) ([]Info, error) {
	var done []Info
	err := m.locked(ctx, func(ctx context.Context, applied []int64) error {
		missing, err := m.missing(ctx, applied)
		if err != nil {
			return err
		}
		if len(missing) > 0 {
			return m.tablesMissingError(applied, missing)
		}
		for _, mg := range migrations {
			if mg.version > version || slices.Contains(applied, int64(mg.version)) {
				continue
			}
			err := m.admin.MigrationTx(ctx, func(ctx context.Context, q inboxdriver.Querier) error {
				present, checked, err := m.s.inStore(ctx, q, mg)
				if err != nil {
					return err
				}
				for _, stmt := range mg.up(m.s) {
					if checked && present {
						break // made by an earlier run that did not record it
					}
					if err := q.Exec(ctx, stmt); err != nil {
						return err
					}
				}
				return q.Exec(ctx, `INSERT INTO `+m.s.table(m.s.t.Migrations)+` (version, name) VALUES (`+
					m.s.placeholder(1)+`, `+m.s.placeholder(2)+`)`, mg.version, mg.name)
			})
			if err != nil {
				return fmt.Errorf("inbox: migrate up to %03d_%s: %w", mg.version, mg.name, err)
			}
			done = append(done, Info{Version: mg.version, Name: mg.name, Applied: true})
		}
		return nil
	})
	if err == nil && version >= 1 {
		err = m.premake(ctx)
	}
	return done, err
}

// Down reverts applied migrations, newest first, until the store is at
// version (0 reverts all), and returns those it reverted. Reverting drops
// tables: the inbox rows and dead letters in them are lost. Like Up, it
// changes nothing and returns ErrTablesMissing when tables of applied
// migrations are missing: the version table then records other table
// names, whose migrations a revert would undo.
func (m *Migrator) Down(ctx context.Context, version int) ([]Info, error) {
	// Nothing is applied where there is no version table: there is
	// nothing to revert, and nothing is made.
	if ok, err := m.versionTableExists(ctx); err != nil || !ok {
		return nil, err
	}
	var done []Info
	err := m.locked(ctx, func(ctx context.Context, applied []int64) error {
		missing, err := m.missing(ctx, applied)
		if err != nil {
			return err
		}
		if len(missing) > 0 {
			return m.tablesMissingError(applied, missing)
		}
		for i := len(migrations) - 1; i >= 0; i-- {
			mg := migrations[i]
			if mg.version <= version || !slices.Contains(applied, int64(mg.version)) {
				continue
			}
			err := m.admin.MigrationTx(ctx, func(ctx context.Context, q inboxdriver.Querier) error {
				present, checked, err := m.s.inStore(ctx, q, mg)
				if err != nil {
					return err
				}
				for _, stmt := range mg.down(m.s) {
					if checked && !present {
						break // undone by an earlier run that did not record it
					}
					if err := q.Exec(ctx, stmt); err != nil {
						return err
					}
				}
				return q.Exec(ctx, `DELETE FROM `+m.s.table(m.s.t.Migrations)+` WHERE version = `+m.s.placeholder(1), mg.version)
			})
			if err != nil {
				return fmt.Errorf("inbox: migrate down from %03d_%s: %w", mg.version, mg.name, err)
			}
			done = append(done, Info{Version: mg.version, Name: mg.name})
		}
		return nil
	})
	return done, err
}

// Current returns the newest applied version, 0 if none, only reading, as
// Status does.
func (m *Migrator) Current(ctx context.Context) (int, error) {
	st, err := m.Status(ctx)
	if err != nil {
		return 0, err
	}
	cur := 0
	for _, i := range st {
		if i.Applied {
			cur = i.Version
		}
	}
	return cur, nil
}

// Applied returns the versions the store has applied, oldest first, only
// reading: it neither creates the version table nor waits for the
// migration lock, so a check may call it on a store it must not change. A
// store without a version table fails with the store's own error, which
// its Classify reports as inboxdriver.ClassNotMigrated.
func (m *Migrator) Applied(ctx context.Context) ([]int, error) {
	var applied []int
	err := m.admin.MigrationTx(ctx, func(ctx context.Context, q inboxdriver.Querier) error {
		vs, err := q.QueryInts(ctx, `SELECT version FROM `+m.s.table(m.s.t.Migrations)+` ORDER BY version`)
		for _, v := range vs {
			applied = append(applied, int(v))
		}
		return err
	})
	return applied, err
}

// Status lists every migration and whether the store has it. It only
// reads: a store without the version table has none, and is left without
// it (and without its schema). A store that does not read its catalog
// (inboxdriver.Catalog) gets the version table made, as Up makes it.
func (m *Migrator) Status(ctx context.Context) ([]Info, error) {
	var applied []int64
	var err error
	if _, ok := m.admin.(inboxdriver.Catalog); ok {
		applied, err = m.appliedOrNone(ctx)
	} else {
		err = m.locked(ctx, func(_ context.Context, a []int64) error {
			applied = a
			return nil
		})
	}
	if err != nil {
		return nil, err
	}
	var out []Info
	for _, mg := range migrations {
		out = append(out, Info{Version: mg.version, Name: mg.name, Applied: slices.Contains(applied, int64(mg.version))})
	}
	return out, nil
}

// versionTableExists reports, only reading, whether the store has the
// version table. A store that does not read its catalog
// (inboxdriver.Catalog) is taken to have it.
func (m *Migrator) versionTableExists(ctx context.Context) (bool, error) {
	cat, ok := m.admin.(inboxdriver.Catalog)
	if !ok {
		return true, nil
	}
	ok, err := cat.TableExists(ctx, m.s.t.Migrations)
	if err != nil {
		return false, fmt.Errorf("inbox: look for table %s: %w", m.s.t.Migrations, err)
	}
	return ok, nil
}

// appliedOrNone returns the applied versions, only reading, and none
// where there is no version table. On a store that does not read its
// catalog, a missing version table fails with the store's error (Applied).
func (m *Migrator) appliedOrNone(ctx context.Context) ([]int64, error) {
	if ok, err := m.versionTableExists(ctx); err != nil || !ok {
		return nil, err
	}
	applied, err := m.Applied(ctx)
	if err != nil {
		return nil, fmt.Errorf("inbox: read applied migrations: %w", err)
	}
	return int64s(applied), nil
}

// locked runs fn under the migration lock with the applied versions,
// creating the version table first.
func (m *Migrator) locked(ctx context.Context, fn func(ctx context.Context, applied []int64) error) error {
	return m.admin.WithMigrationLock(ctx, func(ctx context.Context) error {
		var applied []int64
		err := m.admin.MigrationTx(ctx, func(ctx context.Context, q inboxdriver.Querier) error {
			for _, stmt := range m.s.versionTable() {
				if err := q.Exec(ctx, stmt); err != nil {
					return err
				}
			}
			var err error
			applied, err = q.QueryInts(ctx, `SELECT version FROM `+m.s.table(m.s.t.Migrations)+` ORDER BY version`)
			return err
		})
		if err != nil {
			return fmt.Errorf("inbox: read applied migrations: %w", err)
		}
		return fn(ctx, applied)
	})
}

// Format is a layout of rendered migrations.
type Format string

// The formats Render writes.
const (
	// FormatPlain is one script of every up migration, in order.
	FormatPlain Format = "plain"
	// FormatGoose is one goose file per migration, with Up and Down
	// sections.
	FormatGoose Format = "goose"
	// FormatGolangMigrate is an .up.sql and a .down.sql file per migration,
	// as golang-migrate reads them.
	FormatGolangMigrate Format = "golang-migrate"
)

// File is one rendered migration file.
type File struct {
	Name    string
	Content string
}

// Render returns the migrations as SQL files in format f, for dialect d and
// table names t, for teams that apply migrations with their own tool. The
// version table is left out: the tool keeps its own.
func Render(d inboxdriver.Dialect, t inboxdriver.Tables, f Format) ([]File, error) {
	t = t.WithDefaults()
	if err := t.Validate(d); err != nil {
		return nil, err
	}
	switch d {
	case inboxdriver.DialectPostgres, inboxdriver.DialectMySQL, inboxdriver.DialectSQLite:
	default:
		return nil, fmt.Errorf("inbox: unknown dialect %q: want postgres, mysql or sqlite", d)
	}
	s := &schema{d: d, t: t}
	script := func(stmts []string) string {
		var b strings.Builder
		for _, st := range stmts {
			b.WriteString(st)
			b.WriteString(";\n")
		}
		return b.String()
	}
	var files []File
	switch f {
	case FormatPlain, "":
		var b strings.Builder
		fmt.Fprintf(&b, "-- inbox migrations 001 to %03d for %s\n", Latest(), d)
		if t.Layout == inboxdriver.LayoutPartitioned {
			b.WriteString("-- The inbox is partitioned by day: make its partitions with 'inbox partitions premake' before the first claim.\n")
		}
		if t.Schema != "" && d == inboxdriver.DialectPostgres {
			b.WriteString("CREATE SCHEMA IF NOT EXISTS " + s.ident(t.Schema) + ";\n")
		}
		for _, mg := range migrations {
			fmt.Fprintf(&b, "\n-- %03d_%s\n", mg.version, mg.name)
			b.WriteString(script(mg.up(s)))
		}
		files = append(files, File{Name: "inbox.sql", Content: b.String()})
	case FormatGoose:
		for _, mg := range migrations {
			content := "-- +goose Up\n" + script(mg.up(s)) + "\n-- +goose Down\n" + script(mg.down(s))
			files = append(files, File{Name: fmt.Sprintf("%05d_inbox_%s.sql", mg.version, mg.name), Content: content})
		}
	case FormatGolangMigrate:
		for _, mg := range migrations {
			base := fmt.Sprintf("%06d_inbox_%s", mg.version, mg.name)
			files = append(files,
				File{Name: base + ".up.sql", Content: script(mg.up(s))},
				File{Name: base + ".down.sql", Content: script(mg.down(s))})
		}
	default:
		return nil, fmt.Errorf("inbox: unknown migration format %q: want plain, goose or golang-migrate", f)
	}
	return files, nil
}
