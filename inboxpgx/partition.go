package inboxpgx

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxtype"
	"github.com/txinbox/inbox/internal/pgpartition"
)

var _ inboxdriver.Partitioner = (*Driver)(nil)

// PartitionConfig implements inboxdriver.Partitioner.
func (d *Driver) PartitionConfig() inboxdriver.PartitionConfig { return d.partitions.Config() }

// Partitions implements inboxdriver.Partitioner.
func (d *Driver) Partitions(ctx context.Context) (*inboxtype.PartitionState, error) {
	if err := d.partitioned(); err != nil {
		return nil, err
	}
	return d.partitions.State(ctx)
}

// PartitionMaintain implements inboxdriver.Partitioner.
func (d *Driver) PartitionMaintain(ctx context.Context, p *inboxtype.PartitionMaintainParams) (*inboxtype.PartitionMaintainReport, error) {
	if err := d.partitioned(); err != nil {
		return nil, err
	}
	return d.partitions.Maintain(ctx, p)
}

var _ inboxdriver.Adopter = (*Driver)(nil)

// PartitionAdopt implements inboxdriver.Adopter: the store's Tables.Layout
// is partitioned, and its inbox table still the plain one.
func (d *Driver) PartitionAdopt(ctx context.Context, p *inboxtype.PartitionAdoptParams) (*inboxtype.PartitionAdoptReport, error) {
	if err := d.partitioned(); err != nil {
		return nil, err
	}
	return d.partitions.Adopt(ctx, p)
}

func (d *Driver) partitioned() error {
	if d.tables.Layout != inboxdriver.LayoutPartitioned {
		return pgpartition.ErrNotPartitioned
	}
	return nil
}

// claimError returns the error of a claim of ids that failed with err:
// when no partition covers one of the ids, an
// *inboxdriver.NoPartitionError that says which and why.
func (d *Driver) claimError(ctx context.Context, ids []string, err error) error {
	if !d.noPartition(err) {
		return err
	}
	return d.partitions.Miss(ctx, ids, err)
}

// noPartition reports whether err is Postgres refusing a row of the inbox
// that no partition takes (SQLSTATE 23514 on the parent, with no
// constraint: a CHECK constraint would be named).
func (d *Driver) noPartition(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23514" && pgErr.ConstraintName == "" && pgErr.TableName == d.tables.Inbox
}

// partitionDB runs maintenance on the driver's pool.
type partitionDB struct{ d *Driver }

func (db partitionDB) Query(ctx context.Context, query string, args []any, row func(scan func(dest ...any) error) error) error {
	rows, err := db.d.pool.Query(ctx, query, args...)
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
	_, err := db.d.pool.Exec(ctx, query, args...)
	return err
}

func (db partitionDB) Tx(ctx context.Context, stmts ...string) error {
	return pgx.BeginFunc(ctx, db.d.pool, func(tx pgx.Tx) error {
		for _, s := range stmts {
			if _, err := tx.Exec(ctx, s); err != nil {
				return err
			}
		}
		return nil
	})
}

func (db partitionDB) WithLock(ctx context.Context, key string, fn func(ctx context.Context) error) (bool, error) {
	return db.d.WithLock(ctx, key, fn)
}

// purgeByKey is the purge of a partitioned inbox. The plain table's purge
// deletes by ctid, which names a row within one table only: across
// partitions it would match rows of other days that happen to sit at the
// same place. This one deletes by the primary key.
func purgeByKey(inbox, effects string) string {
	return `WITH batch AS (
    SELECT consumer_name, message_id FROM ` + inbox + `
     WHERE processed_at < now() - $1::bigint * interval '1 microsecond' AND ($2 = '' OR consumer_name = $2)
     LIMIT $3
       FOR UPDATE SKIP LOCKED
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
