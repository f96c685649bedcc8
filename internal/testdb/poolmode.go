package testdb

// PgBouncer pool modes.
const (
	// PoolTransaction gives a client a server connection for one
	// transaction at a time: session state (prepared statements, session
	// advisory locks, SET) does not carry from one transaction to the next.
	PoolTransaction = "transaction"
	// PoolSession gives a client a server connection for as long as it is
	// connected.
	PoolSession = "session"
)

// PgBouncerPoolSize is the number of server connections a PgBouncer of
// PgBouncer keeps per database and user in transaction pooling (20 in
// session pooling): small, since the test server is
// shared. A client pool of at most this size never waits in PgBouncer's
// queue holding one server connection for another.
const PgBouncerPoolSize = 8
