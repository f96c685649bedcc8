package inboxdriver

import "context"

// PoolingProber is implemented by a store that can tell whether a
// transaction pooler (PgBouncer's pool_mode=transaction) stands between it
// and the database, and whether its way of running statements survives
// one. inbox doctor uses it.
type PoolingProber interface {
	// PoolingProbe looks for a transaction pooler: it sets session state
	// on one connection and looks for it from another, and from the first
	// in a later transaction. It takes two connections of the pool for a
	// moment, and leaves no state behind that matters.
	PoolingProbe(ctx context.Context) (*Pooling, error)
}

// Pooling is what PoolingProbe found.
type Pooling struct {
	// Transaction is true when session state did not stay with its
	// connection: another client connection saw it, or the connection's
	// next transaction did not. Only a transaction (or statement) pooler
	// does that. False means none was seen: a session pooler, or a
	// transaction pooler that happened to keep the connections apart.
	Transaction bool
	// ExecMode names how the store's driver runs statements, such as
	// pgx's default_query_exec_mode; "" when it has no such setting.
	ExecMode string
	// ExecModeSafe is true when ExecMode leaves nothing on a server
	// connection that a later transaction relies on, so that it works
	// behind a transaction pooler.
	ExecModeSafe bool
	// SafeExecModes are the modes that work behind a transaction pooler,
	// best first, when ExecMode is not one of them.
	SafeExecModes []string
}
