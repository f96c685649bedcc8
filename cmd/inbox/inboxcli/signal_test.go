//go:build unix

package inboxcli_test

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox/internal/testdb"
)

// A signal ends a long command after its cleanup: SIGINT (Ctrl-C) with exit
// 130 and one line that says so; SIGTERM, a supervisor's stop, ends a
// service such as 'inbox admin' with 0.
func TestSignalEndsALongCommand(t *testing.T) {
	t.Parallel()
	_, schema := migratedPgx(t)
	for _, tc := range []struct {
		sig  syscall.Signal
		code int
		says string
	}{
		{syscall.SIGINT, 130, "inbox admin: interrupted by SIGINT"},
		{syscall.SIGTERM, 0, ""},
	} {
		cmd := exec.Command(os.Args[0], "admin", "--addr", "127.0.0.1:0", "--schema", schema)
		cmd.Env = append(os.Environ(), runMainEnv+"=1", "DATABASE_URL="+testdb.URL(t))
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill() })

		// It serves once it says so. The child writes stderr until it
		// ends, so stderr is read only after Wait.
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err != nil {
			waitErr := cmd.Wait()
			t.Fatalf("no line on stdout: %v (exit: %v); stderr: %s", err, waitErr, stderr.String())
		}
		require.Contains(t, line, "serving http://")

		require.NoError(t, cmd.Process.Signal(tc.sig))
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err = <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("%v: the command did not end", tc.sig)
		}
		code := 0
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		} else {
			require.NoError(t, err)
		}
		require.Equal(t, tc.code, code, "%v: stderr: %s", tc.sig, stderr.String())
		if tc.says != "" {
			require.Contains(t, stderr.String(), tc.says)
		} else {
			require.Empty(t, stderr.String())
		}
	}
}
