package labcli_test

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"testing"

	"github.com/txinbox/inbox/cmd/inboxlab/labcli"
	"github.com/txinbox/inbox/internal/command/commandtest"
	"github.com/txinbox/inbox/internal/testdb"
)

// TestMain also lets this test binary stand in for the inboxlab binary when
// a command starts copies of itself: the demo and chaos consumers.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && (os.Args[1] == "demo-consumer" || os.Args[1] == "chaos-consumer") {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		code := labcli.Main(ctx, os.Args[1:], &labcli.Env{Stdout: os.Stdout, Stderr: os.Stderr})
		stop()
		os.Exit(code)
	}
	if os.Getenv(runMainEnv) != "" {
		// The whole program, signals and exit status included.
		labcli.Run()
	}
	testdb.Main(m)
}

// runMainEnv, set, makes this test binary run inboxlab's Run with its
// arguments.
const runMainEnv = "INBOXLAB_TEST_RUN_MAIN"

// run runs the command line and returns its exit status and output.
func run(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	return commandtest.Run(t, labcli.Main, env, args...)
}

var requireOneLine = commandtest.RequireOneLine
