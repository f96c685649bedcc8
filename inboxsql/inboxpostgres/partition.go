package inboxpostgres

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// NoPartition reports whether err is Postgres refusing a row of table
// (unqualified) that no partition takes: SQLSTATE 23514 on the table, with
// no constraint named, as a CHECK constraint would be. The store asks it of
// an inbox in the partitioned layout.
func (engine) NoPartition(err error, table string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23514" && pgErr.ConstraintName == "" && pgErr.TableName == table
}
