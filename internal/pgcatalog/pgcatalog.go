// Package pgcatalog holds the Postgres catalog queries of
// inboxdriver.Catalog, which the pgx store and the database/sql store over
// Postgres both run. Each takes text parameters, cast in the query, so that
// it runs in every pgx exec mode and through database/sql alike; a table is
// passed quoted and qualified, as to_regclass reads it.
package pgcatalog

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/txinbox/inbox/inboxdriver"
)

const (
	// TableExists: $1 the table. One boolean.
	TableExists = `SELECT to_regclass($1::text) IS NOT NULL`

	// IndexValid: $1 the table, $2 the index's name. One boolean.
	IndexValid = `SELECT EXISTS (
  SELECT FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
  WHERE i.indrelid = to_regclass($1::text) AND c.relname = $2::text AND i.indisvalid)`

	// RelKind: $1 the table. Its relkind ("p" for a partitioned table),
	// or "" when it does not exist.
	RelKind = `SELECT coalesce((SELECT relkind::text FROM pg_class WHERE oid = to_regclass($1::text)), '')`

	// ColumnType: $1 the table, $2 the column. Its type as format_type
	// gives it ("uuid", "text"), or "" when there is no such column.
	ColumnType = `SELECT coalesce((SELECT format_type(atttypid, atttypmod) FROM pg_attribute
  WHERE attrelid = to_regclass($1::text) AND attname = $2::text AND NOT attisdropped), '')`

	// LacksTablePrivilege: $1 the role ('' for the current user), $2 the
	// table, $3 the privilege. One boolean: true when it is missing.
	LacksTablePrivilege = `SELECT NOT has_table_privilege(COALESCE(NULLIF($1::text, ''), current_user)::name, $2::text, $3::text)`

	// LacksColumnPrivilege: $1 the role, $2 the table, $3 the columns
	// joined with commas, $4 the privilege. One boolean: true when any
	// column lacks it.
	LacksColumnPrivilege = `SELECT EXISTS (
  SELECT FROM unnest(string_to_array($3::text, ',')) AS c
  WHERE NOT has_column_privilege(COALESCE(NULLIF($1::text, ''), current_user)::name, $2::text, c, $4::text))`

	// NowMicros is the server's clock, in microseconds since the epoch.
	NowMicros = `SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint`

	// VacuumHorizon: the age in milliseconds and in transaction ids of the
	// oldest snapshot another session holds, the age of the oldest
	// replication slot's, and the count of prepared transactions. Without
	// pg_read_all_stats a role sees only its own sessions.
	VacuumHorizon = `SELECT
  (SELECT COALESCE(max(extract(epoch FROM clock_timestamp() - xact_start) * 1000), 0)::bigint
     FROM pg_stat_activity WHERE backend_xmin IS NOT NULL AND pid <> pg_backend_pid()),
  (SELECT COALESCE(max(age(backend_xmin)), 0)::bigint
     FROM pg_stat_activity WHERE backend_xmin IS NOT NULL AND pid <> pg_backend_pid()),
  (SELECT COALESCE(max(age(xmin)), 0)::bigint FROM pg_replication_slots),
  (SELECT count(*) FROM pg_prepared_xacts)`

	// Replication: whether the server is a standby, its
	// synchronous_standby_names and synchronous_commit, and its standbys
	// as a JSON array of {name, state, sync_state}.
	Replication = `SELECT pg_is_in_recovery(),
  current_setting('synchronous_standby_names'),
  current_setting('synchronous_commit'),
  (SELECT coalesce(json_agg(json_build_object('name', application_name, 'state', coalesce(state, ''), 'sync_state', coalesce(sync_state, ''))
     ORDER BY application_name), '[]') FROM pg_stat_replication)::text`
)

// Row is one row of a query's result: a pgx.Row or a *sql.Row.
type Row interface{ Scan(dest ...any) error }

// Catalog implements inboxdriver.Catalog on Postgres with these queries,
// over any connection.
type Catalog struct {
	// QueryRow runs a query that returns one row.
	QueryRow func(ctx context.Context, sql string, args ...any) Row
	// Tables are the store's tables.
	Tables inboxdriver.Tables
}

var _ inboxdriver.Catalog = (*Catalog)(nil)

func (c *Catalog) qualified(table string) string {
	return c.Tables.Qualify(inboxdriver.DialectPostgres, table)
}

// TableExists implements inboxdriver.Catalog.
func (c *Catalog) TableExists(ctx context.Context, name string) (bool, error) {
	var ok bool
	err := c.QueryRow(ctx, TableExists, c.qualified(name)).Scan(&ok)
	return ok, err
}

// IndexValid implements inboxdriver.Catalog.
func (c *Catalog) IndexValid(ctx context.Context, table, index string) (bool, error) {
	var ok bool
	err := c.QueryRow(ctx, IndexValid, c.qualified(table), index).Scan(&ok)
	return ok, err
}

// InboxLayout implements inboxdriver.Catalog.
func (c *Catalog) InboxLayout(ctx context.Context) (inboxdriver.Layout, error) {
	var kind string
	if err := c.QueryRow(ctx, RelKind, c.qualified(c.Tables.Inbox)).Scan(&kind); err != nil {
		return "", err
	}
	if kind == "p" {
		return inboxdriver.LayoutPartitioned, nil
	}
	return inboxdriver.LayoutPlain, nil
}

// InboxIDType implements inboxdriver.Catalog.
func (c *Catalog) InboxIDType(ctx context.Context) (inboxdriver.IDType, error) {
	var typ string
	if err := c.QueryRow(ctx, ColumnType, c.qualified(c.Tables.Inbox), "message_id").Scan(&typ); err != nil {
		return "", err
	}
	switch typ {
	case "":
		return "", nil
	case "uuid":
		return inboxdriver.IDTypeUUID, nil
	}
	return inboxdriver.IDTypeText, nil
}

// MissingGrants implements inboxdriver.Catalog, with has_table_privilege
// and has_column_privilege.
func (c *Catalog) MissingGrants(ctx context.Context, role string, want []inboxdriver.Grant) ([]inboxdriver.Grant, error) {
	var missing []inboxdriver.Grant
	for _, g := range want {
		var lacks bool
		var err error
		if len(g.Columns) > 0 {
			err = c.QueryRow(ctx, LacksColumnPrivilege, role, c.qualified(g.Table), strings.Join(g.Columns, ","), g.Privilege).Scan(&lacks)
		} else {
			err = c.QueryRow(ctx, LacksTablePrivilege, role, c.qualified(g.Table), g.Privilege).Scan(&lacks)
		}
		if err != nil {
			return nil, fmt.Errorf("check %s on %s: %w", g.Privilege, g.Table, err)
		}
		if lacks {
			missing = append(missing, g)
		}
	}
	return missing, nil
}

// Now implements inboxdriver.Catalog: clock_timestamp(), the server's
// clock when the statement runs.
func (c *Catalog) Now(ctx context.Context) (time.Time, error) {
	var us int64
	err := c.QueryRow(ctx, NowMicros).Scan(&us)
	return time.UnixMicro(us), err
}

// VacuumHorizon implements inboxdriver.Catalog.
func (c *Catalog) VacuumHorizon(ctx context.Context) (*inboxdriver.VacuumHorizon, error) {
	var h inboxdriver.VacuumHorizon
	var ms int64
	if err := c.QueryRow(ctx, VacuumHorizon).Scan(&ms, &h.OldestSnapshotXIDs, &h.SlotXIDs, &h.Prepared); err != nil {
		return nil, err
	}
	h.OldestSnapshot = time.Duration(ms) * time.Millisecond
	return &h, nil
}

const (
	// PoolingProbeSet: $1 a random value, set as session state. The
	// backend's pid.
	PoolingProbeSet = `SELECT pg_backend_pid(), set_config('inbox.pooling_probe', $1::text, false) IS NOT NULL`

	// PoolingProbeGet: the backend's pid and the session state that
	// PoolingProbeSet set on it, or '' if none.
	PoolingProbeGet = `SELECT pg_backend_pid(), coalesce(current_setting('inbox.pooling_probe', true), '')`
)

// ProbeConn is one client connection of a pool.
type ProbeConn interface {
	// QueryRow runs a query that returns one row.
	QueryRow(ctx context.Context, sql string, args ...any) Row
	// Exec runs a statement without arguments.
	Exec(ctx context.Context, sql string) error
}

// PoolingProbe reports whether session state set through a is seen
// through b, in a transaction that b holds open, or is gone from a's next
// transaction: what only a transaction pooler does (see
// inboxdriver.PoolingProber). probe is a random value. Directly, or
// through a session pooler, neither can happen, so a true answer is never
// wrong; a transaction pooler that hands b another server connection and a
// its own again goes unseen. PgBouncer hands out the server connection
// used last first, so b gets a's.
func PoolingProbe(ctx context.Context, a, b ProbeConn, probe string) (bool, error) {
	var pidA1, pidB, pidA2 int32
	var ok bool
	if err := a.QueryRow(ctx, PoolingProbeSet, probe).Scan(&pidA1, &ok); err != nil {
		return false, err
	}
	if err := b.Exec(ctx, "BEGIN"); err != nil {
		return false, err
	}
	var seenB, seenA string
	err := b.QueryRow(ctx, PoolingProbeGet).Scan(&pidB, &seenB)
	if err == nil {
		// While b holds its server connection, a runs again.
		err = a.QueryRow(ctx, PoolingProbeGet).Scan(&pidA2, &seenA)
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if rerr := b.Exec(rctx, "ROLLBACK"); err == nil {
		err = rerr
	}
	if err != nil {
		return false, err
	}
	return seenB == probe || seenA != probe || pidA2 != pidA1, nil
}

// Replication implements inboxdriver.Catalog.
func (c *Catalog) Replication(ctx context.Context) (*inboxdriver.Replication, error) {
	var r inboxdriver.Replication
	var standbys string
	if err := c.QueryRow(ctx, Replication).Scan(&r.InRecovery, &r.SynchronousStandbyNames, &r.SynchronousCommit, &standbys); err != nil {
		return nil, err
	}
	var rows []struct {
		Name      string `json:"name"`
		State     string `json:"state"`
		SyncState string `json:"sync_state"`
	}
	if err := json.Unmarshal([]byte(standbys), &rows); err != nil {
		return nil, fmt.Errorf("read pg_stat_replication: %w", err)
	}
	for _, row := range rows {
		r.Standbys = append(r.Standbys, inboxdriver.Standby{Name: row.Name, State: row.State, SyncState: row.SyncState})
	}
	return &r, nil
}
