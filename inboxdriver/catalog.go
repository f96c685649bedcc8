package inboxdriver

import (
	"context"
	"time"
)

// Catalog is what a store can read of its database's catalog: whether its
// tables and indexes exist, the inbox table's layout, a role's grants, the
// server's clock and what holds back vacuum. The inbox command's doctor,
// stats, partitions and migrate commands ask it, so that no caller queries a
// dialect's system tables itself, as river asks IndexExists of its drivers.
//
// A store that cannot answer a question for its dialect (SQLite has no
// grants, and runs on the caller's clock) returns an error that wraps
// errors.ErrUnsupported.
type Catalog interface {
	// TableExists reports whether the table name, one of the store's
	// Tables, exists in the store's schema.
	TableExists(ctx context.Context, name string) (bool, error)

	// IndexValid reports whether the index named index exists on the
	// table named table, and is valid: Postgres leaves an index that a
	// CREATE INDEX CONCURRENTLY did not finish in place, unusable.
	IndexValid(ctx context.Context, table, index string) (bool, error)

	// InboxLayout reads the inbox table's layout from the database:
	// LayoutPartitioned when it is a partitioned table. It returns
	// LayoutPlain when the table does not exist.
	InboxLayout(ctx context.Context) (Layout, error)

	// InboxIDType reads the type of the inbox's message_id column from the
	// database, or returns "" when the table does not exist. A dialect
	// whose column is the same for both id types (SQLite) returns an error
	// that wraps errors.ErrUnsupported.
	InboxIDType(ctx context.Context) (IDType, error)

	// MissingGrants returns the grants of want that role lacks; an empty
	// role is the connecting user.
	MissingGrants(ctx context.Context, role string, want []Grant) ([]Grant, error)

	// Now reads the database server's clock.
	Now(ctx context.Context) (time.Time, error)

	// VacuumHorizon says what holds back the removal of dead rows, such as
	// those a purge deleted.
	VacuumHorizon(ctx context.Context) (*VacuumHorizon, error)

	// Replication reads how the server replicates: whether it is a
	// standby, what its commits wait for, and the standbys that stream
	// from it.
	Replication(ctx context.Context) (*Replication, error)
}

// Replication is how a server replicates, as Postgres reports it.
type Replication struct {
	// InRecovery is true on a standby (pg_is_in_recovery()): it is
	// read-only.
	InRecovery bool
	// SynchronousStandbyNames and SynchronousCommit are the settings of
	// those names, as the connecting session sees them.
	SynchronousStandbyNames string
	SynchronousCommit       string
	// Standbys are the standbys that stream from the server
	// (pg_stat_replication).
	Standbys []Standby
}

// Standby is one row of pg_stat_replication.
type Standby struct {
	// Name is its application_name.
	Name string
	// State is "streaming", "catchup"…, and SyncState "async", "sync",
	// "potential" or "quorum". Both are empty when the role may not read
	// them (pg_read_all_stats or pg_monitor grants it).
	State, SyncState string
}

// Grant is a privilege on one of the store's tables.
type Grant struct {
	// Table is the table's name, one of the store's Tables.
	Table string
	// Privilege is SELECT, INSERT, UPDATE or DELETE.
	Privilege string
	// Columns limit an UPDATE to these columns: each must be updatable.
	// Empty means the whole table.
	Columns []string
}

// VacuumHorizon is what holds back vacuum on the server: the oldest
// transaction that holds a snapshot (other than the caller's), replication
// slots and prepared transactions.
type VacuumHorizon struct {
	// OldestSnapshot is how long the oldest transaction holding a snapshot
	// has been open, and OldestSnapshotXIDs how many transaction ids old
	// its snapshot is. Zero when there is none.
	OldestSnapshot     time.Duration
	OldestSnapshotXIDs int64
	// SlotXIDs is the age, in transaction ids, of the oldest snapshot that
	// a replication slot holds.
	SlotXIDs int64
	// Prepared counts prepared transactions.
	Prepared int64
}
