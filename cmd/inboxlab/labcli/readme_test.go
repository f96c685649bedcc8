package labcli_test

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox/cmd/inboxlab/internal/chaos"
	"github.com/txinbox/inbox/cmd/inboxlab/labcli"
	"github.com/txinbox/inbox/internal/readme"
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

// The README shows recorded chaos runs, too long to run in a test: each is
// held to the summary that 'inboxlab chaos' prints today for a run of its
// transport with the default faults, line by line, with the figures (and
// the lists of kill points and fault kinds, which depend on what fired)
// masked. A line the command gained or lost, or reworded, fails it.
func TestREADMEShowsTheChaosSummary(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		transport string
		poison    int // crash-poison events
	}{{"kafka", 2}, {"sqs", 2}} {
		t.Run(tc.transport, func(t *testing.T) {
			t.Parallel()
			shown, err := readme.Output(filepath.Join("..", "..", "..", "README.md"), "inboxlab chaos --transport "+tc.transport)
			require.NoError(t, err)
			res := &chaos.Result{
				Transport: tc.transport, Store: "postgres", Events: 5000, Seed: 1, OK: true, Elapsed: 2 * time.Minute,
				Kills: 3, Restarts: 3, KillsAt: map[string]int{"after-claim": 1, "mid-batch": 1, "random-time": 1},
				DBFaults:        map[string]int{"read-only": 1, "terminate": 2},
				CrashPoisonSent: tc.poison, CrashPoisonDeadLettered: tc.poison, PoisonCrashes: tc.poison,
				InboxRows: 5000 - tc.poison,
			}
			var printed strings.Builder
			labcli.PrintChaos(&printed, res)
			require.Equal(t, chaosShape(printed.String()), chaosShape(shown),
				"README.md's chaos block for %s is not what 'inboxlab chaos' prints: run it again and copy its output", tc.transport)
		})
	}
}

var (
	chaosLists   = regexp.MustCompile(`(kills \d+ )\([^)]*\)|(database faults: )[^;]*`)
	chaosFigures = regexp.MustCompile(`\d+(\.\d+)?`)
)

// chaosShape masks what differs between runs of a chaos summary: the
// lists of kill points and fault kinds, then every figure.
func chaosShape(s string) string {
	s = chaosLists.ReplaceAllString(s, "$1$2…")
	return chaosFigures.ReplaceAllString(s, "N")
}
