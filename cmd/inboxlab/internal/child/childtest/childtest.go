// Package childtest lets a test binary stand in for the lab's child
// processes (the demo's and chaos's consumers, the outbox chaos's
// children), for the tests that start them.
package childtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
)

// Run makes this test binary the child named name when the environment
// variable env is "1": it runs run with the process's arguments until
// SIGTERM or SIGINT, and exits, 1 when run failed. Otherwise it returns,
// and TestMain goes on to run the tests.
func Run(env, name string, run func(ctx context.Context, args []string) error) {
	if os.Getenv(env) != "1" {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// Command returns the command that starts this test binary as the child
// whose Run is keyed by env.
func Command(env string, args []string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), env+"=1")
	return cmd
}
