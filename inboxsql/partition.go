package inboxsql

import (
	"context"
	"database/sql"

	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxtype"
	"github.com/txinbox/inbox/internal/pgpartition"
)

var _ inboxdriver.Partitioner = (*Driver)(nil)

// partitionEngine is an engine that can tell the error of a row that no
// partition of a partitioned table takes: inboxpostgres.Engine.
type partitionEngine interface {
	// NoPartition reports whether err is Postgres refusing a row of table
	// (unqualified) because no partition takes it.
	NoPartition(err error, table string) bool
}

// PartitionConfig implements inboxdriver.Partitioner.
func (d *Driver) PartitionConfig() inboxdriver.PartitionConfig {
	if d.partitions == nil {
		return inboxdriver.PartitionConfig{}.WithDefaults()
	}
	return d.partitions.Config()
}

// Partitions implements inboxdriver.Partitioner, on Postgres.
func (d *Driver) Partitions(ctx context.Context) (*inboxtype.PartitionState, error) {
	if d.tables.Layout != inboxdriver.LayoutPartitioned {
		return nil, pgpartition.ErrNotPartitioned
	}
	return d.partitions.State(ctx)
}

// PartitionMaintain implements inboxdriver.Partitioner, on Postgres.
func (d *Driver) PartitionMaintain(ctx context.Context, p *inboxtype.PartitionMaintainParams) (*inboxtype.PartitionMaintainReport, error) {
	if d.tables.Layout != inboxdriver.LayoutPartitioned {
		return nil, pgpartition.ErrNotPartitioned
	}
	return d.partitions.Maintain(ctx, p)
}

var _ inboxdriver.Adopter = (*Driver)(nil)

// PartitionAdopt implements inboxdriver.Adopter, on Postgres: the store's
// Tables.Layout is partitioned, and its inbox table still the plain one.
func (d *Driver) PartitionAdopt(ctx context.Context, p *inboxtype.PartitionAdoptParams) (*inboxtype.PartitionAdoptReport, error) {
	if d.tables.Layout != inboxdriver.LayoutPartitioned {
		return nil, pgpartition.ErrNotPartitioned
	}
	return d.partitions.Adopt(ctx, p)
}

// claimError returns the error of a claim of ids that failed with err:
// when no partition covers one of the ids, an
// *inboxdriver.NoPartitionError that says which and why, whatever the
// layout the store was configured with.
func (d *Driver) claimError(ctx context.Context, ids []string, err error) error {
	if err == nil || d.partitions == nil {
		return err
	}
	pe, ok := d.engine.(partitionEngine)
	if !ok || !pe.NoPartition(err, d.tables.Inbox) {
		return err
	}
	return d.partitions.Miss(ctx, ids, err)
}

// purgeByKey is the purge of a partitioned inbox, as where selects: the
// plain table's purge deletes by ctid, which names a row within one table
// only, so across partitions it would match rows of other days that sit
// at the same place. This one deletes by the primary key.
func purgeByKey(inbox, effects, where, limit string) string {
	return `WITH batch AS (
    SELECT consumer_name, message_id FROM ` + inbox + where + ` LIMIT ` + limit + ` FOR UPDATE SKIP LOCKED
), purged AS (
    DELETE FROM ` + inbox + ` AS i USING batch AS b
     WHERE i.consumer_name = b.consumer_name AND i.message_id = b.message_id
    RETURNING i.consumer_name, i.message_id
), effects AS (
    DELETE FROM ` + effects + ` AS e USING purged AS p
     WHERE e.consumer_name = p.consumer_name AND e.message_id = p.message_id
)
SELECT count(*) FROM purged`
}

// partitionDB runs maintenance on the driver's database.
type partitionDB struct{ d *Driver }

func (db partitionDB) Query(ctx context.Context, query string, args []any, row func(scan func(dest ...any) error) error) error {
	rows, err := db.d.db.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := row(rows.Scan); err != nil {
			return err
		}
	}
	return rows.Err()
}

func (db partitionDB) Exec(ctx context.Context, query string, args ...any) error {
	_, err := db.d.db.ExecContext(ctx, query, args...)
	return err
}

func (db partitionDB) Tx(ctx context.Context, stmts ...string) error {
	return inTx(ctx, db.d.db, func(tx *sql.Tx) error {
		for _, s := range stmts {
			if _, err := tx.ExecContext(ctx, s); err != nil {
				return err
			}
		}
		return nil
	})
}

func (db partitionDB) WithLock(ctx context.Context, key string, fn func(ctx context.Context) error) (bool, error) {
	return db.d.WithLock(ctx, key, fn)
}
