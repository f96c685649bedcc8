package labcli_test

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// An unknown --db-faults kind is a usage error that names it, before
// anything starts.
func TestChaosOutboxDBFaultsFlag(t *testing.T) {
	t.Parallel()
	code, _, errOut := run(t, nil, "chaos", "--outbox", "--db-faults", "revoke-insert,flood")
	require.Equal(t, 2, code)
	requireOneLine(t, errOut)
	require.Contains(t, errOut, `"flood"`)
}
