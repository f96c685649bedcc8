package inboxcli

import (
	"context"
	"net"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/txinbox/inbox/internal/command"
)

// A store that cannot be opened says why in an error that keeps its
// cause, for errors.Is and errors.As, and never shows the URL's password.
func TestOpenErrorsKeepTheirCause(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := &storeFlags{}

	_, err := f.openPostgres(ctx, "postgres://postgres:secret@127.0.0.1:1/test?connect_timeout=2")
	var ce *pgconn.ConnectError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "secret", ce.Config.Password, "the password reached the driver")
	var oe *net.OpError
	require.ErrorAs(t, err, &oe)
	require.NotContains(t, err.Error(), "secret")

	_, err = f.openPostgres(ctx, "postgres://postgres:secret@127.0.0.1/test?connect_timeout=x")
	var ue *command.UsageError
	require.ErrorAs(t, err, &ue)
	var pe *pgconn.ParseConfigError
	require.ErrorAs(t, err, &pe)
	require.ErrorIs(t, err, strconv.ErrSyntax)
	require.NotContains(t, err.Error(), "secret")

	_, err = f.openMySQL(ctx, "mysql://root:secret@127.0.0.1:1/db")
	require.ErrorAs(t, err, &oe)
	require.NotContains(t, err.Error(), "secret")

	cfg, where, err := mysqlConfig("mysql://root:secret@db.example:3307/inbox?parseTime=true")
	require.NoError(t, err)
	require.Equal(t, "db.example:3307/inbox", where)
	require.Equal(t, "secret", cfg.Passwd)
	require.True(t, cfg.ParseTime)

	_, _, err = mysqlConfig("mysql://root:secret@127.0.0.1/db?parseTime=maybe")
	require.Error(t, err)
	require.NotContains(t, err.Error(), "secret")
}
