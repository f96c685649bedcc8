package inboxcli_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox/cmd/inbox/inboxcli"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxmigrate"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/internal/testdb"
)

// pgxDriver returns an inboxpgx driver over tables, on the tests' shared
// pool: the store a test seeds and inspects beside the commands it runs.
func pgxDriver(t *testing.T, tables inboxdriver.Tables) *inboxpgx.Driver {
	t.Helper()
	d, err := inboxpgx.New(inboxcli.SharedPool(t), &inboxpgx.Config{Tables: tables})
	require.NoError(t, err)
	return d
}

// migratedPgx returns an inboxpgx driver, on the tests' shared pool, over a
// schema of the test's own that the migrations made, and the schema's name.
func migratedPgx(t *testing.T) (*inboxpgx.Driver, string) {
	t.Helper()
	schema := testdb.Schema(t)
	d := pgxDriver(t, inboxdriver.Tables{Schema: schema})
	m, err := inboxmigrate.New(d)
	require.NoError(t, err)
	_, err = m.Up(context.Background())
	require.NoError(t, err)
	return d, schema
}
