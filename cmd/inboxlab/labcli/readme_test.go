package labcli_test

import (
	"path/filepath"
	"testing"

	"github.com/txinbox/inbox/internal/readme"
	"github.com/txinbox/inbox/internal/require"
)

// The README shows the demo's default run as it prints it: the run is
// repeatable, so the block is compared whole.
func TestREADMEShowsTheDemo(t *testing.T) {
	t.Parallel()
	want, err := readme.Output(filepath.Join("..", "..", "..", "README.md"), "inboxlab demo")
	require.NoError(t, err)
	code, stdout, stderr := run(t, nil, "demo")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, want, stdout, "README.md's demo block differs from 'inboxlab demo': copy the output into the README")
}
