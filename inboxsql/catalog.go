package inboxsql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/internal/pgcatalog"
)

var _ inboxdriver.Catalog = (*Driver)(nil)

// dbOf is the database that holds table: the ledger's own file for the
// effects table, when it has one.
func (d *Driver) dbOf(table string) *sql.DB {
	if table == d.tables.Effects && d.effectsDB != nil {
		return d.effectsDB
	}
	return d.db
}

// pg is the catalog of a store on Postgres.
func (d *Driver) pg() *pgcatalog.Catalog {
	return &pgcatalog.Catalog{
		QueryRow: func(ctx context.Context, sql string, args ...any) pgcatalog.Row {
			return d.db.QueryRowContext(ctx, sql, args...)
		},
		Tables: d.tables,
	}
}

// TableExists implements inboxdriver.Catalog.
func (d *Driver) TableExists(ctx context.Context, name string) (bool, error) {
	var n int
	var err error
	switch {
	case d.dialect == Postgres:
		return d.pg().TableExists(ctx, name)
	case d.dialect.mysql():
		err = d.db.QueryRowContext(ctx, `SELECT count(*) FROM information_schema.tables WHERE table_name = ? AND table_schema = COALESCE(NULLIF(?, ''), DATABASE())`,
			name, d.tables.Schema).Scan(&n)
	default:
		err = d.dbOf(name).QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?`, name).Scan(&n)
	}
	return n > 0, err
}

// IndexValid implements inboxdriver.Catalog.
func (d *Driver) IndexValid(ctx context.Context, table, index string) (bool, error) {
	var n int
	var err error
	switch {
	case d.dialect == Postgres:
		return d.pg().IndexValid(ctx, table, index)
	case d.dialect.mysql():
		err = d.db.QueryRowContext(ctx, `SELECT count(*) FROM information_schema.statistics WHERE index_name = ? AND table_name = ? AND table_schema = COALESCE(NULLIF(?, ''), DATABASE())`,
			index, table, d.tables.Schema).Scan(&n)
	default:
		err = d.dbOf(table).QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = ? AND tbl_name = ?`, index, table).Scan(&n)
	}
	return n > 0, err
}

// InboxLayout implements inboxdriver.Catalog. Only Postgres partitions an
// inbox.
func (d *Driver) InboxLayout(ctx context.Context) (inboxdriver.Layout, error) {
	if d.dialect != Postgres {
		return inboxdriver.LayoutPlain, nil
	}
	return d.pg().InboxLayout(ctx)
}

// InboxIDType implements inboxdriver.Catalog, on Postgres and MySQL: a
// uuid column is CHAR(36) on MySQL, a text one VARCHAR(255). SQLite keeps
// both as TEXT.
func (d *Driver) InboxIDType(ctx context.Context) (inboxdriver.IDType, error) {
	switch {
	case d.dialect == Postgres:
		return d.pg().InboxIDType(ctx)
	case d.dialect.mysql():
		var typ string
		err := d.db.QueryRowContext(ctx, `SELECT COALESCE(MAX(LOWER(data_type)), '') FROM information_schema.columns
WHERE table_schema = COALESCE(NULLIF(?, ''), DATABASE()) AND table_name = ? AND column_name = 'message_id'`,
			d.tables.Schema, d.tables.Inbox).Scan(&typ)
		switch {
		case err != nil || typ == "":
			return "", err
		case typ == "char":
			return inboxdriver.IDTypeUUID, nil
		}
		return inboxdriver.IDTypeText, nil
	}
	return "", fmt.Errorf("inboxsql: SQLite keeps both id types as TEXT: %w", errors.ErrUnsupported)
}

// MissingGrants implements inboxdriver.Catalog, on Postgres. MySQL's grants
// are not read yet, and SQLite has none.
func (d *Driver) MissingGrants(ctx context.Context, role string, want []inboxdriver.Grant) ([]inboxdriver.Grant, error) {
	if d.dialect != Postgres {
		return nil, fmt.Errorf("inboxsql: reading the grants on %s: %w", d.dialect, errors.ErrUnsupported)
	}
	return d.pg().MissingGrants(ctx, role, want)
}

// Now implements inboxdriver.Catalog. SQLite runs in the caller's process,
// on its clock.
func (d *Driver) Now(ctx context.Context) (time.Time, error) {
	switch {
	case d.dialect == Postgres:
		return d.pg().Now(ctx)
	case d.dialect.mysql():
		var us int64
		err := d.db.QueryRowContext(ctx, `SELECT CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)`).Scan(&us)
		return time.UnixMicro(us), err
	}
	return time.Time{}, fmt.Errorf("inboxsql: SQLite runs on the caller's clock: %w", errors.ErrUnsupported)
}

// VacuumHorizon implements inboxdriver.Catalog, on Postgres: the other
// dialects have no vacuum that a snapshot holds back.
func (d *Driver) VacuumHorizon(ctx context.Context) (*inboxdriver.VacuumHorizon, error) {
	if d.dialect != Postgres {
		return nil, fmt.Errorf("inboxsql: %s has no vacuum horizon: %w", d.dialect, errors.ErrUnsupported)
	}
	return d.pg().VacuumHorizon(ctx)
}

// Replication implements inboxdriver.Catalog, on Postgres: the replication
// of MySQL is not read yet, and SQLite has none.
func (d *Driver) Replication(ctx context.Context) (*inboxdriver.Replication, error) {
	if d.dialect != Postgres {
		return nil, fmt.Errorf("inboxsql: reading the replication of %s: %w", d.dialect, errors.ErrUnsupported)
	}
	return d.pg().Replication(ctx)
}
