// Package inboxcli is the inbox command: every subcommand, writing to the
// writers it is given, so that tests can run it in process. cmd/inbox is a
// thin main over Main.
package inboxcli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/txinbox/inbox"
)

// Env is what a command may touch of the outside world.
type Env struct {
	Stdout io.Writer
	Stderr io.Writer
	// Getenv reads the environment. Defaults to os.Getenv.
	Getenv func(string) string
	// Args0 is the path of the running binary, for commands that start
	// copies of it. Defaults to os.Args[0].
	Args0 string
}

// command is one subcommand.
type command struct {
	summary string
	run     func(ctx context.Context, e *Env, args []string) error
	hidden  bool
}

// commands lists the subcommands. "help" is handled by Main.
var commands = map[string]command{
	"migrate":     {summary: "create or upgrade the inbox tables: up, down, status, sql", run: runMigrate},
	"purge":       {summary: "delete inbox rows older than a window, in batches", run: runPurge},
	"forget":      {summary: "delete one inbox row, so that its message applies again", run: runForget},
	"stats":       {summary: "rows per consumer, the oldest row's age, the table size", run: runStats},
	"chaos":       {summary: "kill real consumers at fault points and check exactly-once", run: runChaos},
	"demo":        {summary: "the handler that ran twice: the common fixes for duplicates, crashed side by side", run: runDemo},
	"deadletters": {summary: "messages that will not be applied: list, show, replay, delete", run: runDeadLetters},
	"partitions":  {summary: "the day partitions of a partitioned inbox: list, premake, drop", run: runPartitions},
	"admin":       {summary: "serve the admin page: consumers, dead letters (replay), stuck effects, the outbox", run: runAdmin},
	"doctor":      {summary: "check a deployment: schema, indexes, retention, clocks, grants, stuck work", run: runDoctor},

	"outbox":             {summary: "the producer's events not yet published: stats, list, show, retry, park, unpark", run: runOutbox},
	"relay":              {summary: "publish the outbox's events to Kafka", run: runRelay},
	"chaos-outbox":       {summary: "kill producers, relays and consumers of the outbox and check exactly-once end to end", run: runChaosOutbox},
	"chaos-outbox-child": {hidden: true, run: runChaosOutboxChild},

	"chaos-consumer": {hidden: true, run: runChaosConsumer},
	"demo-consumer":  {hidden: true, run: runDemoConsumer},
	"bench":          {summary: "measure the inbox against no dedup, check-then-insert and Redis SETNX", run: runBench},
}

// usageError is a mistake in the command line. It exits with status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// Main runs the command line args (without the program name) and returns
// the exit status: 0 on success, 1 when the command failed, 2 for a usage
// mistake. Errors are printed to e.Stderr as one line.
func Main(ctx context.Context, args []string, e *Env) int {
	if e.Getenv == nil {
		e.Getenv = os.Getenv
	}
	if e.Args0 == "" {
		e.Args0 = os.Args[0]
	}
	if len(args) == 0 {
		printHelp(e.Stderr)
		return 2
	}
	name := args[0]
	switch name {
	case "help", "-h", "-help", "--help":
		printHelp(e.Stdout)
		return 0
	}
	cmd, ok := commands[name]
	if !ok {
		fmt.Fprintf(e.Stderr, "inbox: unknown command %q; run 'inbox help' for the list\n", name)
		return 2
	}
	err := cmd.run(ctx, e, args[1:])
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	default:
		// The packages under a command prefix their errors with their own
		// name ("chaos: …", "inbox: …"): the line says it once.
		msg := oneLine(strings.ReplaceAll(err.Error(), "inbox: ", ""))
		msg = strings.TrimPrefix(msg, name+": ")
		fmt.Fprintf(e.Stderr, "inbox %s: %s\n", name, msg)
		var ue *usageError
		if errors.As(err, &ue) {
			return 2
		}
		return 1
	}
}

// oneLine folds an error onto one line, and says a line that repeats
// once: pgx lists every connection attempt, and with sslmode=prefer it
// makes two identical ones to a server that does not answer.
func oneLine(s string) string {
	var parts []string
	seen := map[string]bool{}
	for _, l := range strings.Split(s, "\n") {
		l = strings.Join(strings.Fields(l), " ")
		if l == "" || seen[l] {
			continue
		}
		seen[l] = true
		parts = append(parts, l)
	}
	return strings.Join(parts, " ")
}

func printHelp(w io.Writer) {
	fmt.Fprintln(w, "inbox: exactly-once effects from at-least-once delivery, with a transactional inbox.")
	fmt.Fprintln(w, "\nUsage: inbox <command> [flags]\n\nCommands:")
	names := make([]string, 0, len(commands))
	for n, c := range commands {
		if !c.hidden {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-12s %s\n", n, commands[n].summary)
	}
	fmt.Fprintf(w, "  %-12s %s\n", "help", "show this help")
	fmt.Fprintln(w, "\nRun 'inbox <command> -h' for a command's flags.")
}

// flagSet is a flag set that reports errors instead of exiting and prints
// its usage only when asked with -h.
type flagSet struct {
	*flag.FlagSet
	usage string
	out   io.Writer
}

func newFlags(e *Env, name, usage string) *flagSet {
	fs := flag.NewFlagSet("inbox "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &flagSet{FlagSet: fs, usage: usage, out: e.Stdout}
}

// parseFlags parses args, turning a flag mistake into a usage error and
// rejecting arguments left over beyond maxArgs.
func parseFlags(fs *flagSet, args []string, maxArgs int) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(fs.out, "Usage: inbox %s\n\nFlags:\n", fs.usage)
			fs.SetOutput(fs.out)
			fs.PrintDefaults()
			return err
		}
		return usagef("%v", err)
	}
	if fs.NArg() > maxArgs {
		return usagef("unexpected argument %q", fs.Arg(maxArgs))
	}
	return nil
}

// checkConsumer validates a --consumer flag before it reaches a database,
// which would refuse a NUL byte or invalid UTF-8 with an SQL error.
func checkConsumer(name string) error {
	if err := inbox.ValidateConsumer(name); err != nil {
		return usagef("--consumer: %v", err)
	}
	return nil
}
