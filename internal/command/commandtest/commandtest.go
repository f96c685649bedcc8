// Package commandtest runs a command of the inbox or inboxlab programs in
// process, for their tests.
package commandtest

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox/internal/command"
)

// Main is a program's Main.
type Main func(ctx context.Context, args []string, e *command.Env) int

// Run runs the command line args under main, with env as the whole
// environment, and returns its exit status and output.
func Run(t testing.TB, main Main, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = main(context.Background(), args, &command.Env{
		Stdout: &out, Stderr: &errOut,
		Getenv: func(k string) string { return env[k] },
	})
	return code, out.String(), errOut.String()
}

// RequireOneLine fails the test unless s is one line that is not a panic.
func RequireOneLine(t testing.TB, s string) {
	t.Helper()
	require.NotEmpty(t, s)
	require.Equal(t, 1, strings.Count(s, "\n"), "want a one-line error, got %q", s)
	require.NotContains(t, s, "goroutine", "no panic traces")
}

// RequireDocsCoverCommands fails the test unless the Markdown file at
// docPath has a section "## `program name`" for every command the
// program's help lists, and only for those; each section says its exit
// status, and names the subcommands its summary lists ("…: up, down").
func RequireDocsCoverCommands(t *testing.T, main Main, program, docPath string) {
	t.Helper()
	doc, err := os.ReadFile(docPath)
	require.NoError(t, err)
	sections := map[string]string{}
	heading := regexp.MustCompile("(?m)^## `" + regexp.QuoteMeta(program) + " ([a-z-]+)`\n")
	locs := heading.FindAllStringSubmatchIndex(string(doc), -1)
	for i, loc := range locs {
		end := len(doc)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		sections[string(doc[loc[2]:loc[3]])] = string(doc[loc[1]:end])
	}

	code, stdout, _ := Run(t, main, nil, "help")
	require.Equal(t, 0, code)
	listed := map[string]bool{}
	line := regexp.MustCompile(`(?m)^  ([a-z-]+) +(.*)$`)
	subcommands := regexp.MustCompile(`: ([a-z]+(?:, [a-z]+)+)$`)
	for _, m := range line.FindAllStringSubmatch(stdout, -1) {
		name, summary := m[1], m[2]
		listed[name] = true
		section, ok := sections[name]
		if !ok {
			t.Errorf("%s has no section \"## `%s %s`\"", docPath, program, name)
			continue
		}
		require.Contains(t, section, "Exit status", "the section of %s", name)
		// A summary that ends in ": up, down, status, sql" names the
		// subcommands.
		if m := subcommands.FindStringSubmatch(summary); m != nil {
			for _, sub := range strings.Split(m[1], ", ") {
				require.Contains(t, section, program+" "+name+" "+sub, "the section of %s names its subcommand %s", name, sub)
			}
		}
	}
	require.NotEmpty(t, listed, "the help lists the commands: %s", stdout)
	for name := range sections {
		require.True(t, listed[name], "%s has a section for %q, which '%s help' does not list", docPath, name, program)
	}
}

// RequireUsageSaidOnce runs each command line, a usage mistake, and fails
// the test unless it exits 2 with one line that names the program and the
// command once, without the packages' own "inbox: " prefix.
func RequireUsageSaidOnce(t *testing.T, main Main, program string, cmdlines ...[]string) {
	t.Helper()
	for _, args := range cmdlines {
		code, _, stderr := Run(t, main, nil, args...)
		require.Equal(t, 2, code, "%v", args)
		RequireOneLine(t, stderr)
		require.True(t, strings.HasPrefix(stderr, program+" "+args[0]+": "), "%v: %s", args, stderr)
		require.False(t, strings.HasPrefix(stderr, program+" "+args[0]+": "+args[0]+":"), "%v: %s", args, stderr)
		require.NotContains(t, stderr, "inbox: ", "%v", args)
	}
}
