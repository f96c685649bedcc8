package inboxcli_test

import (
	"context"
	"testing"

	"github.com/txinbox/inbox/cmd/inbox/inboxcli"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxmigrate"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/internal/require"
	"github.com/txinbox/inbox/internal/testdb"
)

// migratedPgx returns an inboxpgx driver, on the tests' shared pool, over a
// schema of the test's own that the migrations made, and the schema's name.
func migratedPgx(t *testing.T) (*inboxpgx.Driver, string) {
	t.Helper()
	schema := testdb.Schema(t)
	d, err := inboxpgx.New(inboxcli.SharedPool(t), &inboxpgx.Config{Tables: inboxdriver.Tables{Schema: schema}})
	require.NoError(t, err)
	m, err := inboxmigrate.New(d)
	require.NoError(t, err)
	_, err = m.Up(context.Background())
	require.NoError(t, err)
	return d, schema
}
