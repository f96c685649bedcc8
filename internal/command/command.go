// Package command is the frame that the inbox command and the lab's
// command share: a table of subcommands, flags whose mistakes are usage
// errors (exit status 2), durations that take days, and errors printed on
// one line. Everything a command touches of the outside world comes in an
// Env, so that tests run the commands in process.
package command

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
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

	// program is the name of the program, for usage lines.
	program string
}

// Command is one subcommand.
type Command struct {
	// Summary is its line in the help.
	Summary string
	// Run runs it with the arguments after its name.
	Run func(ctx context.Context, e *Env, args []string) error
	// Hidden leaves it out of the help: a child process's entry point.
	Hidden bool
	// Service says the command runs until it is stopped, as a server or
	// a relay does: SIGTERM, a supervisor's stop, is its normal end, and
	// exits 0. SIGINT (Ctrl-C) still exits 130.
	Service bool
}

// Program is a command line program made of subcommands.
type Program struct {
	// Name is the program's name: "inbox".
	Name string
	// About is the first line of the help.
	About string
	// Commands are the subcommands by name. "help" is the program's own.
	Commands map[string]Command
}

// Main runs the command line args (without the program name) and returns
// the exit status: 0 on success, 1 when the command failed, 2 for a usage
// mistake. An error is printed to e.Stderr as one line.
func (p *Program) Main(ctx context.Context, args []string, e *Env) int {
	if e.Getenv == nil {
		e.Getenv = os.Getenv
	}
	if e.Args0 == "" {
		e.Args0 = os.Args[0]
	}
	e.program = p.Name
	if len(args) == 0 {
		p.printHelp(e.Stderr)
		return 2
	}
	name := args[0]
	switch name {
	case "help", "-h", "-help", "--help":
		p.printHelp(e.Stdout)
		return 0
	}
	cmd, ok := p.Commands[name]
	if !ok {
		fmt.Fprintf(e.Stderr, "%s: unknown command %q; run '%s help' for the list\n", p.Name, name, p.Name)
		return 2
	}
	ctx, cleaned := withCleanupLog(ctx)
	err := cmd.Run(ctx, e, args[1:])
	var intr *Interrupted
	if errors.As(context.Cause(ctx), &intr) && !errors.Is(err, flag.ErrHelp) {
		// The command has returned from its cleanup: say so once, with
		// what the cleanup removed (Cleaned), and exit as a shell expects
		// of a signal.
		if cmd.Service && intr.Signal == syscall.SIGTERM {
			return 0
		}
		fmt.Fprintf(e.Stderr, "%s %s: interrupted by %s%s\n", p.Name, name, signalName(intr.Signal), cleaned)
		return intr.ExitCode()
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	default:
		fmt.Fprintf(e.Stderr, "%s %s: %s\n", p.Name, name, Message(err))
		var ue *UsageError
		if errors.As(err, &ue) {
			return 2
		}
		return 1
	}
}

func (p *Program) printHelp(w io.Writer) {
	fmt.Fprintln(w, p.About)
	fmt.Fprintf(w, "\nUsage: %s <command> [flags]\n\nCommands:\n", p.Name)
	names := make([]string, 0, len(p.Commands))
	for n, c := range p.Commands {
		if !c.Hidden {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-12s %s\n", n, p.Commands[n].Summary)
	}
	fmt.Fprintf(w, "  %-12s %s\n", "help", "show this help")
	fmt.Fprintf(w, "\nRun '%s <command> -h' for a command's flags.\n", p.Name)
}

// Message is err's text as a command prints it: on one line, with the
// control characters of any stored text it quotes escaped (Text).
func Message(err error) string {
	return Text(OneLine(err.Error()))
}

// UsageError is a mistake in the command line. It exits with status 2.
type UsageError struct{ err error }

func (e *UsageError) Error() string { return e.err.Error() }

// Unwrap returns the error Usagef made, which wraps the errors its %w
// verbs named.
func (e *UsageError) Unwrap() error { return e.err }

// Usagef returns a UsageError, formatted as fmt.Errorf formats: a %w verb
// keeps its error in the chain, for errors.Is and errors.As.
func Usagef(format string, args ...any) error {
	return &UsageError{err: fmt.Errorf(format, args...)}
}

// OneLine folds an error onto one line, and says a line that repeats
// once: pgx lists every connection attempt, and with sslmode=prefer it
// makes two identical ones to a server that does not answer.
func OneLine(s string) string {
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

// FlagSet is a flag set that reports errors instead of exiting and prints
// its usage only when asked with -h.
type FlagSet struct {
	*flag.FlagSet
	usage   string
	program string
	out     io.Writer
}

// NewFlags returns the flag set of the command name; usage is its synopsis,
// printed after "Usage: <program> ".
func NewFlags(e *Env, name, usage string) *FlagSet {
	program := e.program
	if program == "" {
		program = "inbox"
	}
	fs := flag.NewFlagSet(program+" "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &FlagSet{FlagSet: fs, usage: usage, program: program, out: e.Stdout}
}

// Parse parses args, turning a flag mistake into a usage error and
// rejecting arguments left over beyond maxArgs. For -h it prints the usage
// and returns flag.ErrHelp.
func (fs *FlagSet) Parse(args []string, maxArgs int) error {
	if err := fs.FlagSet.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(fs.out, "Usage: %s %s\n\nFlags:\n", fs.program, fs.usage)
			fs.SetOutput(fs.out)
			fs.PrintDefaults()
			return err
		}
		return Usagef("%v", err)
	}
	if fs.NArg() > maxArgs {
		return Usagef("unexpected argument %q", fs.Arg(maxArgs))
	}
	return nil
}

// Set reports whether the flag name was given on the command line.
func (fs *FlagSet) Set(name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			set = true
		}
	})
	return set
}

// Count says n things, in the singular for one: "1 row", "2 rows".
func Count[N ~int | ~int64](n N, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// Interrupted is the cause of a command's context that a signal cancelled
// (context.Cause): the command cleans up and returns, and Main exits with
// ExitCode.
type Interrupted struct{ Signal os.Signal }

func (i *Interrupted) Error() string { return "interrupted by " + signalName(i.Signal) }

// ExitCode is 128 plus the signal's number, as a shell reports a process
// a signal ended: 130 for SIGINT, 143 for SIGTERM.
func (i *Interrupted) ExitCode() int {
	if s, ok := i.Signal.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return 130
}

func signalName(s os.Signal) string {
	switch s {
	case os.Interrupt:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return s.String()
}

// Run is the whole of a program's main: it runs the command line of the
// process with its standard streams and exits with the command's status.
// SIGINT and SIGTERM cancel the command's context with an Interrupted
// cause; a second signal exits at once, without the cleanup.
func (p *Program) Run() {
	ctx, cancel := context.WithCancelCause(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		first := &Interrupted{Signal: <-sigs}
		cancel(first)
		second := &Interrupted{Signal: <-sigs}
		fmt.Fprintf(os.Stderr, "%s: interrupted again by %s: exiting before the cleanup ends\n", p.Name, signalName(second.Signal))
		os.Exit(second.ExitCode())
	}()
	os.Exit(p.Main(ctx, os.Args[1:], &Env{Stdout: os.Stdout, Stderr: os.Stderr}))
}
