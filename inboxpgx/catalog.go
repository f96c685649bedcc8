package inboxpgx

import (
	"context"
	"time"

	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/internal/pgcatalog"
)

var _ inboxdriver.Catalog = (*Driver)(nil)

// catalog is the driver's inboxdriver.Catalog, over its pool.
func (d *Driver) catalog() *pgcatalog.Catalog {
	return &pgcatalog.Catalog{
		QueryRow: func(ctx context.Context, sql string, args ...any) pgcatalog.Row {
			return d.pool.QueryRow(ctx, sql, args...)
		},
		Tables: d.tables,
	}
}

// TableExists implements inboxdriver.Catalog.
func (d *Driver) TableExists(ctx context.Context, name string) (bool, error) {
	return d.catalog().TableExists(ctx, name)
}

// IndexValid implements inboxdriver.Catalog.
func (d *Driver) IndexValid(ctx context.Context, table, index string) (bool, error) {
	return d.catalog().IndexValid(ctx, table, index)
}

// InboxLayout implements inboxdriver.Catalog.
func (d *Driver) InboxLayout(ctx context.Context) (inboxdriver.Layout, error) {
	return d.catalog().InboxLayout(ctx)
}

// InboxIDType implements inboxdriver.Catalog.
func (d *Driver) InboxIDType(ctx context.Context) (inboxdriver.IDType, error) {
	return d.catalog().InboxIDType(ctx)
}

// MissingGrants implements inboxdriver.Catalog.
func (d *Driver) MissingGrants(ctx context.Context, role string, want []inboxdriver.Grant) ([]inboxdriver.Grant, error) {
	return d.catalog().MissingGrants(ctx, role, want)
}

// Now implements inboxdriver.Catalog: the server's clock_timestamp().
func (d *Driver) Now(ctx context.Context) (time.Time, error) { return d.catalog().Now(ctx) }

// VacuumHorizon implements inboxdriver.Catalog. Without pg_read_all_stats
// a role sees only its own sessions.
func (d *Driver) VacuumHorizon(ctx context.Context) (*inboxdriver.VacuumHorizon, error) {
	return d.catalog().VacuumHorizon(ctx)
}

// Replication implements inboxdriver.Catalog.
func (d *Driver) Replication(ctx context.Context) (*inboxdriver.Replication, error) {
	return d.catalog().Replication(ctx)
}
