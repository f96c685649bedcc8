// Package inboxpostgres is the Postgres engine of the inbox's database/sql
// store, through pgx's stdlib: importing it registers pgx's driver as
// "pgx", and nothing else.
//
//	db, err := inboxpostgres.Open("postgres://app@127.0.0.1:5432/app")
//	if err != nil { ... }
//	d, err := inboxsql.New(db, inboxpostgres.Engine, nil)
//
// Package inboxpgx is the primary Postgres store: it sends the claim with
// the BEGIN in one round trip. Use this one where the application already
// speaks database/sql. See package inboxsql for the store itself.
package inboxpostgres

import (
	"database/sql"
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver

	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxsql"
)

// Engine is Postgres through pgx's stdlib, for inboxsql.New.
var Engine inboxsql.Engine = engine{}

type engine struct{}

func (engine) Dialect() inboxsql.Dialect { return inboxsql.Postgres }

// Classify knows pgx's connection errors; the store reads SQLSTATEs
// itself. A connection that could not be made is the server's fault,
// whatever SQLSTATE it carries (a database or role that is missing, a
// CONNECT privilege revoked): no message is at fault.
func (engine) Classify(err error) inboxdriver.ErrorClass {
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) || errors.Is(err, pgconn.ErrConnClosed) || pgconn.SafeToRetry(err) {
		return inboxdriver.ClassUnavailable
	}
	return inboxdriver.ClassOther
}

// DuplicateKey is not asked on Postgres, whose claims use ON CONFLICT.
func (engine) DuplicateKey(error) bool { return false }

// Open opens a database/sql pool on the Postgres server at url, through
// pgx's stdlib driver.
func Open(url string) (*sql.DB, error) { return sql.Open("pgx", url) }
