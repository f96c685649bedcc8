package inboxcli_test

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"testing"

	"github.com/txinbox/inbox/cmd/inbox/inboxcli"
	"github.com/txinbox/inbox/internal/testdb"
)

// TestMain also lets this test binary stand in for the inbox binary when a
// command starts copies of itself: the demo and chaos consumers.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && (os.Args[1] == "demo-consumer" || os.Args[1] == "chaos-consumer") {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		code := inboxcli.Main(ctx, os.Args[1:], &inboxcli.Env{Stdout: os.Stdout, Stderr: os.Stderr})
		stop()
		os.Exit(code)
	}
	testdb.Main(m)
}
