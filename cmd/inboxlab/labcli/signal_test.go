//go:build unix

package labcli_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/inbox/internal/require"
	"github.com/txinbox/inbox/internal/testdb"
)

// SIGINT (Ctrl-C) ends a long lab run after its cleanup: exit 130, and one
// line that says what the cleanup removed, which is then gone.
func TestSIGINTEndsALabRunAfterItsCleanup(t *testing.T) {
	t.Parallel()
	url := testdb.URL(t)
	for _, tc := range []struct {
		name    string
		args    []string
		running string // in a progress line that says the run is under way
	}{
		{"chaos", []string{"chaos", "-v", "--duration", "1m", "--db-faults", "none"}, "chaos: consumer "},
		{"demo", []string{"demo", "-v", "--database-url", url}, "demo: "},
		{"bench", []string{"bench", "--quick", "--rows", "inbox", "--workers", "1", "--purge-rows", "0", "--id-rows", "0", "--rounds", "50"}, " schema inbox_bench_"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], tc.args...)
			cmd.Env = append(os.Environ(), runMainEnv+"=1", "DATABASE_URL="+url)
			stderr, err := cmd.StderrPipe()
			require.NoError(t, err)
			require.NoError(t, cmd.Start())
			t.Cleanup(func() { _ = cmd.Process.Kill() })

			// Read stderr until the run says it is under way, then keep
			// reading it to the end.
			lines := make(chan string, 1024)
			go func() {
				defer close(lines)
				sc := bufio.NewScanner(stderr)
				for sc.Scan() {
					lines <- sc.Text()
				}
				_, _ = io.Copy(io.Discard, stderr)
			}()
			var seen []string
			for l := range lines {
				seen = append(seen, l)
				if strings.Contains(l, tc.running) {
					break
				}
			}
			require.True(t, len(seen) > 0 && strings.Contains(seen[len(seen)-1], tc.running), "the run never said it was under way: %q", seen)

			require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
			var last string
			ended := time.After(60 * time.Second) // a generous bound for "it ended", not a timing
		read:
			for {
				select {
				case l, ok := <-lines:
					if !ok {
						break read
					}
					seen = append(seen, l)
					last = l
				case <-ended:
					t.Fatalf("the run did not end after SIGINT; stderr: %q", seen)
				}
			}
			err = cmd.Wait()
			var exit *exec.ExitError
			require.True(t, errors.As(err, &exit), "exit: %v", err)
			require.Equal(t, 130, exit.ExitCode(), "stderr: %q", seen)
			require.Contains(t, last, "inboxlab "+tc.name+": interrupted by SIGINT; ")

			// The schema the line names is gone.
			m := regexp.MustCompile(`dropped schema (\S+?)(,|$)`).FindStringSubmatch(last)
			require.NotNil(t, m, "no dropped schema in %q", last)
			conn, err := pgx.Connect(context.Background(), url)
			require.NoError(t, err)
			defer conn.Close(context.Background())
			var n int
			require.NoError(t, conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, m[1]).Scan(&n))
			require.Equal(t, 0, n, "schema %s still exists", m[1])
		})
	}
}
