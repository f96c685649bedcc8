// Command inbox runs and maintains a transactional inbox: migrations,
// purges, statistics, dead letters, the demo, the chaos run and the
// benchmarks. Run 'inbox help'.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/txinbox/inbox/cmd/inbox/inboxcli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := inboxcli.Main(ctx, os.Args[1:], &inboxcli.Env{Stdout: os.Stdout, Stderr: os.Stderr})
	stop()
	os.Exit(code)
}
