package command_test

import (
	"bytes"
	"context"
	"errors"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox/internal/command"
)

// A command that a signal ends says what its cleanup removed, on the one
// line that says it was interrupted; a command that ends on its own says
// nothing of it.
func TestInterruptedSaysWhatWasCleaned(t *testing.T) {
	t.Parallel()
	p := &command.Program{Name: "lab", Commands: map[string]command.Command{
		"run": {Run: func(ctx context.Context, e *command.Env, args []string) error {
			command.Cleaned(ctx, "stopped %d consumers", 3)
			command.Cleaned(ctx, "")
			command.Cleaned(ctx, "dropped schema\nx")
			<-ctx.Done()
			return context.Cause(ctx)
		}},
		"quick": {Run: func(ctx context.Context, e *command.Env, args []string) error {
			command.Cleaned(ctx, "dropped schema y")
			return errors.New("failed")
		}},
	}}

	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(&command.Interrupted{Signal: syscall.SIGINT})
	var out, errOut bytes.Buffer
	code := p.Main(ctx, []string{"run"}, &command.Env{Stdout: &out, Stderr: &errOut})
	require.Equal(t, 130, code)
	require.Equal(t, "lab run: interrupted by SIGINT; stopped 3 consumers, dropped schema x\n", errOut.String())
	require.Empty(t, out.String())

	errOut.Reset()
	code = p.Main(context.Background(), []string{"quick"}, &command.Env{Stdout: &out, Stderr: &errOut})
	require.Equal(t, 1, code)
	require.Equal(t, "lab quick: failed\n", errOut.String())

	// Without Main's context, Cleaned does nothing.
	command.Cleaned(context.Background(), "dropped schema z")
}
