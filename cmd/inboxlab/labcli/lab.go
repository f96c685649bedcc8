// Package labcli is the inboxlab command: the demo, the chaos runs and the
// benchmarks, each writing to the writers it is given so that tests can run
// it in process. cmd/inboxlab is a thin main over Main.
//
// The lab is kept apart from the operations command (cmd/inbox): it links
// in-process brokers (kfake, goaws, an embedded NATS server), Watermill and
// the test-database helper, which a production binary should not carry.
package labcli

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"

	"github.com/txinbox/inbox/internal/command"
)

// Env is what a command may touch of the outside world.
type Env = command.Env

var program = &command.Program{
	Name:  "inboxlab",
	About: "inboxlab: the inbox's demo, crash tests and benchmarks, on in-process or real brokers.",
	Commands: map[string]command.Command{
		"demo":  {Summary: "the handler that ran twice: the common fixes for duplicates, crashed side by side", Run: runDemo},
		"chaos": {Summary: "kill real consumers at fault points and check exactly-once", Run: runChaos},
		"bench": {Summary: "measure the inbox against no dedup, check-then-insert and Redis SETNX", Run: runBench},

		"chaos-outbox": {Summary: "kill producers, relays and consumers of the outbox and check exactly-once end to end", Run: runChaosOutbox},

		"chaos-outbox-child": {Hidden: true, Run: runChaosOutboxChild},
		"chaos-consumer":     {Hidden: true, Run: runChaosConsumer},
		"demo-consumer":      {Hidden: true, Run: runDemoConsumer},
	},
}

// Main runs the command line args (without the program name) and returns
// the exit status: 0 on success, 1 when the command failed, 2 for a usage
// mistake.
func Main(ctx context.Context, args []string, e *Env) int {
	return program.Main(ctx, args, e)
}

// Run runs the process's command line and exits with its status: SIGINT
// and SIGTERM end the command after its cleanup, with 130 or 143.
func Run() { program.Run() }

// child returns the command that starts sub, a hidden command of this very
// binary, for the processes a run starts and kills.
func child(e *Env, sub string) func(args []string) *exec.Cmd {
	self, err := os.Executable()
	if err != nil {
		self = e.Args0
	}
	return func(args []string) *exec.Cmd {
		return exec.Command(self, append([]string{sub}, args...)...)
	}
}

// progress is where a run logs its progress: stderr with -v, else nowhere.
func progress(e *Env, verbose bool) io.Writer {
	if verbose {
		return e.Stderr
	}
	return io.Discard
}

// output writes a run's result: one JSON object with asJSON, else the
// text that print writes.
func output[R any](e *Env, asJSON bool, res R, print func(w io.Writer, res R)) error {
	if asJSON {
		return json.NewEncoder(e.Stdout).Encode(res)
	}
	print(e.Stdout, res)
	return nil
}
