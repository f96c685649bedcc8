package inboxpgx

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/internal/pgcatalog"
)

var _ inboxdriver.PoolingProber = (*Driver)(nil)

// PoolerSafeExecModes are pgx's exec modes that work behind a transaction
// pooler, best first. cache_describe caches only statement descriptions,
// client-side, and runs the unnamed statement; exec and simple_protocol
// prepare nothing. The default, cache_statement, prepares named
// statements on a server connection that the pooler may hand to another
// client ("prepared statement already exists", 42P05) or not give back
// (26000); describe_exec describes and executes in two round trips, which
// a pooler may send to two server connections.
var PoolerSafeExecModes = []pgx.QueryExecMode{pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol}

// ExecModePoolerSafe reports whether mode works behind a transaction
// pooler: it is one of PoolerSafeExecModes.
func ExecModePoolerSafe(mode pgx.QueryExecMode) bool {
	for _, m := range PoolerSafeExecModes {
		if m == mode {
			return true
		}
	}
	return false
}

// PoolingProbe implements inboxdriver.PoolingProber on two connections of
// the pool, and reports the pool's default_query_exec_mode.
func (d *Driver) PoolingProbe(ctx context.Context) (*inboxdriver.Pooling, error) {
	mode := d.pool.Config().ConnConfig.DefaultQueryExecMode
	p := &inboxdriver.Pooling{ExecMode: execModeName(mode), ExecModeSafe: ExecModePoolerSafe(mode)}
	if !p.ExecModeSafe {
		for _, m := range PoolerSafeExecModes {
			p.SafeExecModes = append(p.SafeExecModes, execModeName(m))
		}
	}
	a, err := d.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer a.Release()
	b, err := d.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer b.Release()
	var r [8]byte
	_, _ = rand.Read(r[:])
	p.Transaction, err = pgcatalog.PoolingProbe(ctx, probeConn{a}, probeConn{b}, hex.EncodeToString(r[:]))
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "42P05" || pgErr.Code == "26000") && !p.ExecModeSafe {
		// A prepared statement that already exists, or does not: a
		// transaction pooler mixed up two connections' statements.
		p.Transaction = true
		return p, nil
	}
	if err != nil {
		return nil, err
	}
	return p, nil
}

type probeConn struct{ c *pgxpool.Conn }

func (c probeConn) QueryRow(ctx context.Context, sql string, args ...any) pgcatalog.Row {
	return c.c.QueryRow(ctx, sql, args...)
}

func (c probeConn) Exec(ctx context.Context, sql string) error {
	_, err := c.c.Exec(ctx, sql)
	return err
}

// execModeName is mode as default_query_exec_mode names it in a URL.
func execModeName(mode pgx.QueryExecMode) string {
	switch mode {
	case pgx.QueryExecModeCacheStatement:
		return "cache_statement"
	case pgx.QueryExecModeCacheDescribe:
		return "cache_describe"
	case pgx.QueryExecModeDescribeExec:
		return "describe_exec"
	case pgx.QueryExecModeExec:
		return "exec"
	case pgx.QueryExecModeSimpleProtocol:
		return "simple_protocol"
	}
	return mode.String()
}
