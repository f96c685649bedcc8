//go:build unix

package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The supervisor tests run stand-in consumers: this test binary again, with
// INBOX_CHAOS_IDLE naming how it behaves. Each writes a file named for its
// pid into INBOX_CHAOS_PIDS once it is ready.
const (
	// idleTerm exits when asked to stop, as a consumer does.
	idleTerm = "term"
	// idleIgnoreTerm ignores SIGTERM: only SIGKILL ends it.
	idleIgnoreTerm = "ignore-term"
	// idleHoldPipes starts a process that inherits its stdout and stderr
	// and outlives it, then exits when asked to stop.
	idleHoldPipes = "hold-pipes"
	// idleRefused says why it cannot start, as a consumer whose login
	// the database refuses does, and exits 1.
	idleRefused = "refused"
)

// runIdle is the main of a stand-in consumer.
func runIdle(mode string) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	name := strconv.Itoa(os.Getpid())
	if mode == idleRefused {
		fmt.Fprintln(os.Stderr, "inboxlab chaos-consumer: password authentication failed for user \"chaos\"")
		os.Exit(1)
	}
	if mode == idleHoldPipes {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), "INBOX_CHAOS_IDLE="+idleIgnoreTerm, "INBOX_CHAOS_GRANDCHILD=1")
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Start(); err != nil {
			fmt.Fprintln(os.Stderr, "idle:", err)
			os.Exit(1)
		}
	}
	if os.Getenv("INBOX_CHAOS_GRANDCHILD") == "1" {
		name = "grandchild-" + name
	}
	if err := os.WriteFile(filepath.Join(os.Getenv("INBOX_CHAOS_PIDS"), name), nil, 0o600); err != nil {
		fmt.Fprintln(os.Stderr, "idle:", err)
		os.Exit(1)
	}
	fmt.Println("tx 1 0")
	for range sigs {
		if mode != idleIgnoreTerm {
			os.Exit(0)
		}
	}
}

// idleSupervisor returns a supervisor of n stand-in consumers that behave as
// mode says, and the directory their pid files go to.
func idleSupervisor(t *testing.T, n int, mode string) (*supervisor, string) {
	t.Helper()
	dir := t.TempDir()
	cfg := &Config{
		Consumers: n,
		Log:       logWriter{t},
		Command: func(args []string) *exec.Cmd {
			cmd := exec.Command(os.Args[0], args...)
			cmd.Env = append(os.Environ(), "INBOX_CHAOS_IDLE="+mode, "INBOX_CHAOS_PIDS="+dir)
			return cmd
		},
	}
	s := newSupervisor(cfg, nil, &Result{KillsAt: map[string]int{}})
	t.Cleanup(func() {
		// Whatever a failed test left running.
		for _, pid := range pids(t, dir, "") {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return s, dir
}

// pids returns the pids of the pid files in dir whose names start with
// prefix, without it ("" for the consumers, "grandchild-" for theirs).
func pids(t *testing.T, dir, prefix string) []int {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var out []int
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if pid, err := strconv.Atoi(rest); ok && err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// waitFor polls cond until it holds, failing the test after a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(time.Minute)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// stopAllReturns runs s.stopAll, failing the test if it hangs.
func stopAllReturns(t *testing.T, s *supervisor) {
	t.Helper()
	done := make(chan struct{})
	go func() { s.stopAll(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("stopAll hung")
	}
}

// requireGone checks that every process of pids has exited and been reaped.
func requireGone(t *testing.T, pids []int) {
	t.Helper()
	for _, pid := range pids {
		err := syscall.Kill(pid, 0)
		require.True(t, errors.Is(err, syscall.ESRCH), "consumer pid %d still exists: %v", pid, err)
	}
}

func (s *supervisor) liveProcs() []*proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*proc, 0, len(s.live))
	for p := range s.live {
		out = append(out, p)
	}
	return out
}

// A consumer killed just before the drain is restarted by its reaper while
// the drain replaces it: the slot must end up with one process, not two of
// which stopAll knows one.
func TestSupervisorRestartRacesDrain(t *testing.T) {
	t.Parallel()
	s, dir := idleSupervisor(t, 2, idleTerm)
	ctx := context.Background()
	require.NoError(t, s.startAll(ctx))
	waitFor(t, "the consumers to start", func() bool { return len(pids(t, dir, "")) == 2 })

	for round := range 3 {
		s.mu.Lock()
		killed := s.procs[0]
		s.mu.Unlock()
		require.NoError(t, killed.cmd.Process.Signal(syscall.SIGKILL))
		<-killed.exited
		// Its reaper now waits restartDelay before restarting slot 0; the
		// drain replaces the slot meanwhile (or just after).
		require.NoError(t, s.replace(ctx, 0), "round %d", round)
		<-killed.done

		live := s.liveProcs()
		require.Len(t, live, 2, "round %d: one process per slot", round)
		s.mu.Lock()
		require.ElementsMatch(t, live, s.procs, "round %d: every process is a slot's", round)
		s.mu.Unlock()
	}
	stopAllReturns(t, s)
	require.Empty(t, s.liveProcs())
	requireGone(t, pids(t, dir, ""))
	require.Empty(t, s.res.Problems)
}

// A consumer that ignores the request to stop is killed after the grace.
func TestSupervisorStopAllKillsWhatIgnoresStop(t *testing.T) {
	t.Parallel()
	s, dir := idleSupervisor(t, 2, idleIgnoreTerm)
	s.stopGrace = 100 * time.Millisecond
	require.NoError(t, s.startAll(context.Background()))
	waitFor(t, "the consumers to start", func() bool { return len(pids(t, dir, "")) == 2 })

	stopAllReturns(t, s)
	require.Empty(t, s.liveProcs())
	requireGone(t, pids(t, dir, ""))
	require.Empty(t, s.res.Problems)
}

// A process that a consumer started may hold its stdout and stderr after
// it exits: the consumer is reaped all the same.
func TestSupervisorStopAllWhilePipesAreHeld(t *testing.T) {
	t.Parallel()
	s, dir := idleSupervisor(t, 1, idleHoldPipes)
	require.NoError(t, s.startAll(context.Background()))
	waitFor(t, "the consumer and its child to start", func() bool {
		return len(pids(t, dir, "")) == 1 && len(pids(t, dir, "grandchild-")) == 1
	})
	grandchild := pids(t, dir, "grandchild-")[0]
	t.Cleanup(func() { _ = syscall.Kill(grandchild, syscall.SIGKILL) })

	stopAllReturns(t, s)
	require.Empty(t, s.liveProcs())
	requireGone(t, pids(t, dir, ""))
	require.Empty(t, s.res.Problems)
	require.NoError(t, syscall.Kill(grandchild, 0), "the child still holds the pipes")
}

// The drain fails when the work stops moving, and the consumers that do
// not stop when asked are killed.
func TestSupervisorDrainFailsWhenNothingMoves(t *testing.T) {
	t.Parallel()
	s, dir := idleSupervisor(t, 2, idleIgnoreTerm)
	s.stopGrace = 100 * time.Millisecond
	require.NoError(t, s.startAll(context.Background()))
	waitFor(t, "the consumers to start", func() bool { return len(pids(t, dir, "")) == 2 })

	calls := 0
	err := s.drain(context.Background(), time.Second, func(context.Context) (bool, int) { calls++; return false, 7 })
	require.ErrorContains(t, err, "nothing more applied for 1s")
	require.Greater(t, calls, 1, "the drain checks more than once")
	stopAllReturns(t, s)
	requireGone(t, pids(t, dir, ""))
}

// A drain that keeps moving outlasts its stall window, which runs from
// the last headway, and still ends: after drainCap windows in all.
func TestSupervisorDrainWaitsWhileMovingAndIsBounded(t *testing.T) {
	t.Parallel()
	s, dir := idleSupervisor(t, 1, idleIgnoreTerm)
	s.stopGrace = 100 * time.Millisecond
	require.NoError(t, s.startAll(context.Background()))
	waitFor(t, "the consumer to start", func() bool { return len(pids(t, dir, "")) == 1 })

	progress := 0
	err := s.drain(context.Background(), time.Second, func(context.Context) (bool, int) { progress++; return false, progress })
	require.ErrorContains(t, err, fmt.Sprintf("did not drain within %v, though still applying", drainCap*time.Second))
	stopAllReturns(t, s)
	requireGone(t, pids(t, dir, ""))
}

// A consumer that exits on its own is a problem of the run, and the
// problem says what the consumer said last: why it could not go on.
func TestSupervisorSaysWhyAConsumerExited(t *testing.T) {
	t.Parallel()
	s, _ := idleSupervisor(t, 1, idleRefused)
	require.NoError(t, s.startAll(context.Background()))
	waitFor(t, "the consumer's exit to be counted", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.res.Problems) > 0
	})
	stopAllReturns(t, s)
	s.mu.Lock()
	defer s.mu.Unlock()
	require.Equal(t, `consumer 0 exited on its own: exit status 1 (inboxlab chaos-consumer: password authentication failed for user "chaos")`, s.res.Problems[0])
}

func TestLineWriter(t *testing.T) {
	t.Parallel()
	var lines []string
	w := &lineWriter{line: func(l string) { lines = append(lines, l) }}
	for _, s := range []string{"tx 1", "0\ntx 2 1\n", "", "dead a b\npart", "ial"} {
		n, err := w.Write([]byte(s))
		require.NoError(t, err)
		require.Equal(t, len(s), n)
	}
	require.Equal(t, []string{"tx 10", "tx 2 1", "dead a b"}, lines)
	w.flush()
	require.Equal(t, []string{"tx 10", "tx 2 1", "dead a b", "partial"}, lines)
}
