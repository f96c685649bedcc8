package labcli_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox/cmd/inboxlab/internal/chaos"
	"github.com/txinbox/inbox/cmd/inboxlab/labcli"
	"github.com/txinbox/inbox/internal/command/commandtest"
	"github.com/txinbox/inbox/internal/dbfault"
)

func TestHelp(t *testing.T) {
	t.Parallel()
	code, stdout, _ := run(t, nil, "help")
	require.Equal(t, 0, code)
	for _, c := range []string{"demo", "chaos", "bench"} {
		require.Contains(t, stdout, c)
	}
	require.NotContains(t, stdout, "chaos-consumer", "the children's entry points are hidden")
	code, stdout, _ = run(t, nil, "chaos", "-h")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "Usage: inboxlab chaos")
	require.Contains(t, stdout, "-duration")
}

// --db-faults: a comma list of kinds, all for the run's default faults
// (not every kind: the revoke-connect kinds need a database whose CONNECT
// PUBLIC does not hold), none for none.
func TestParseDBFaults(t *testing.T) {
	t.Parallel()
	got, err := labcli.ParseDBFaults("all")
	require.NoError(t, err)
	require.Equal(t, chaos.DefaultDBFaults, got)
	got[0] = "changed"
	require.NotEqual(t, dbfault.Kind("changed"), chaos.DefaultDBFaults[0], "all is a copy")
	got, err = labcli.ParseDBFaults("none")
	require.NoError(t, err)
	require.NotNil(t, got, "none is an empty list, not the default")
	require.Empty(t, got)
	got, err = labcli.ParseDBFaults(" read-only , table-lock")
	require.NoError(t, err)
	require.Equal(t, []dbfault.Kind{dbfault.ReadOnly, dbfault.TableLock}, got)
	for _, bad := range []string{"", "drop-table", "read-only,,table-lock", "all,read-only"} {
		_, err := labcli.ParseDBFaults(bad)
		require.Error(t, err, bad)
		require.Contains(t, err.Error(), "--db-faults", bad)
	}
}

func TestChaosOutboxFlags(t *testing.T) {
	t.Parallel()
	code, _, errOut := run(t, nil, "chaos-outbox", "--duration", "soon")
	require.Equal(t, 2, code)
	requireOneLine(t, errOut)
	code, _, errOut = run(t, nil, "chaos-outbox", "--keys", "-1")
	require.Equal(t, 1, code)
	requireOneLine(t, errOut)
	require.Contains(t, errOut, "Keys")
}

// 'inboxlab chaos --outbox' is chaos-outbox: its flags, its errors.
func TestChaosOutboxFlag(t *testing.T) {
	t.Parallel()
	code, _, errOut := run(t, nil, "chaos", "--outbox", "--duration", "soon")
	require.Equal(t, 2, code)
	requireOneLine(t, errOut)
	code, _, errOut = run(t, nil, "chaos", "--outbox", "--transport", "nats")
	require.Equal(t, 2, code, "chaos --outbox has no --transport")
	requireOneLine(t, errOut)
}

func TestLabDocsCoverEveryCommand(t *testing.T) {
	t.Parallel()
	commandtest.RequireDocsCoverCommands(t, labcli.Main, "inboxlab", filepath.Join("..", "..", "..", "docs", "LAB.md"))
}

func TestErrorsSayItOnce(t *testing.T) {
	t.Parallel()
	commandtest.RequireUsageSaidOnce(t, labcli.Main, "inboxlab",
		[]string{"chaos", "--transport", "rabbit"},
		[]string{"demo", "--database-url", "sqlite:x.db"},
	)
}

// --failover takes sync or async, and starts a cluster of its own: it
// takes no --database-url and no --db-faults. Each mistake is a usage
// error, and starts nothing.
func TestChaosFailoverFlag(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"chaos", "--failover", "semi"},
		{"chaos", "--failover", "sync", "--database-url", "postgres://x@127.0.0.1:1/x"},
		{"chaos", "--failover", "async", "--db-faults", "read-only"},
	} {
		code, _, errOut := run(t, nil, args...)
		require.Equal(t, 2, code, "%v", args)
		requireOneLine(t, errOut)
		require.Contains(t, errOut, "--failover")
	}
}
