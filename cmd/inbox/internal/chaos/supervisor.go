package chaos

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/txinbox/inbox/cmd/inbox/internal/child"
)

// supervisor runs the consumer processes: it starts them, restarts those
// that die, kills them on schedule, and counts what their output reports.
type supervisor struct {
	cfg *Config
	st  store
	tr  transport
	res *Result

	mu      sync.Mutex
	procs   []*proc
	faults  bool // start new processes with INBOX_FAULTS
	stopped bool
	wg      sync.WaitGroup
}

// proc is one consumer slot and the process running in it.
type proc struct {
	slot    int
	cmd     *exec.Cmd
	exited  chan struct{}
	stopped bool // we asked it to stop; not a kill
}

func newSupervisor(cfg *Config, st store, tr transport, res *Result) *supervisor {
	return &supervisor{cfg: cfg, st: st, tr: tr, res: res, faults: true, procs: make([]*proc, cfg.Consumers)}
}

// The kill schedule: one action every killEvery on average, and a fault
// probability per hit that, at the rates the consumers run, adds a few
// self-kills at named points per minute.
const (
	killEvery    = 1500 * time.Millisecond
	faultPerHit  = 0.0015
	restartDelay = 100 * time.Millisecond
)

func (s *supervisor) startAll(ctx context.Context) error {
	for i := range s.procs {
		if err := s.start(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

// start starts the consumer in slot i.
func (s *supervisor) start(ctx context.Context, i int) error {
	args := append([]string{"--slot", fmt.Sprint(i), "--consumer", DefaultConsumerName}, s.st.consumerArgs()...)
	args = append(args, s.tr.consumerArgs()...)
	if s.cfg.ControlNoSkip {
		args = append(args, "--control-no-skip")
	}
	if s.cfg.Pipelined {
		args = append(args, "--pipelined")
	}
	cmd := s.cfg.Command(args)
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, "INBOX_CHAOS_SLOT="+fmt.Sprint(i))
	// A consumer dies with the coordinator, whatever ends it.
	child.DieWithParent(cmd)
	s.mu.Lock()
	if s.faults {
		cmd.Env = append(cmd.Env, "INBOX_FAULTS="+faultSpec(faultPerHit))
	}
	s.mu.Unlock()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("chaos: start consumer %d: %w", i, err)
	}
	p := &proc{slot: i, cmd: cmd, exited: make(chan struct{})}
	s.mu.Lock()
	s.procs[i] = p
	// A stop that began while this process was starting has already taken
	// the list of processes to stop: stop this one here.
	if s.stopped {
		p.stopped = true
		_ = cmd.Process.Signal(syscall.SIGKILL)
	}
	s.mu.Unlock()

	var readers sync.WaitGroup
	readers.Add(2)
	go func() { defer readers.Done(); s.readOutcomes(stdout) }()
	var lastFault string
	go func() {
		defer readers.Done()
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			if pt, ok := strings.CutPrefix(line, "fault: crashing at "); ok {
				lastFault = pt
			} else {
				fmt.Fprintf(s.cfg.Log, "consumer %d: %s\n", i, line)
			}
		}
	}()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		readers.Wait()
		err := cmd.Wait()
		close(p.exited)
		s.mu.Lock()
		stopping := s.stopped || p.stopped
		s.mu.Unlock()
		if stopping {
			return
		}
		if lastFault != "" {
			s.count(func(r *Result) { r.Kills++; r.KillsAt[lastFault]++ })
			fmt.Fprintf(s.cfg.Log, "chaos: consumer %d killed itself at %s\n", i, lastFault)
		} else if !killedBySignal(err) {
			s.count(func(r *Result) {
				r.Problems = append(r.Problems, fmt.Sprintf("consumer %d exited on its own: %v", i, err))
			})
		}
		s.restart(ctx, i)
	}()
	return nil
}

func killedBySignal(err error) bool {
	ee, ok := err.(*exec.ExitError)
	if !ok {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled()
}

// restart starts slot i again after a short delay, unless the run is
// stopping.
func (s *supervisor) restart(ctx context.Context, i int) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(restartDelay):
	}
	s.mu.Lock()
	stopping := s.stopped
	s.mu.Unlock()
	if stopping {
		return
	}
	if err := s.start(ctx, i); err != nil {
		s.count(func(r *Result) { r.Problems = append(r.Problems, err.Error()) })
		return
	}
	s.count(func(r *Result) { r.Restarts++ })
}

// readOutcomes counts the lines a consumer's observer prints:
// "tx APPLIED DUPLICATES" and "dead ID REASON".
func (s *supervisor) readOutcomes(stdout interface{ Read([]byte) (int, error) }) {
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		var applied, dups int
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "tx "):
			if _, err := fmt.Sscanf(line, "tx %d %d", &applied, &dups); err == nil && dups > 0 {
				s.count(func(r *Result) { r.DuplicatesSkipped += dups })
			}
		case strings.HasPrefix(line, "dead "):
			s.count(func(r *Result) { r.Problems = append(r.Problems, "dead-lettered: "+line) })
		}
	}
}

func (s *supervisor) count(f func(r *Result)) {
	s.mu.Lock()
	f(s.res)
	s.mu.Unlock()
}

// chaos runs the kill schedule until ctx is done or done() reports the
// work finished.
func (s *supervisor) chaos(ctx context.Context, r *rand.Rand, done func() bool) {
	tick := time.NewTicker(killEvery / 3)
	defer tick.Stop()
	next := time.Now().Add(jitter(r, killEvery))
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if done() {
			return
		}
		if time.Now().Before(next) {
			continue
		}
		next = time.Now().Add(jitter(r, killEvery))
		switch n := r.IntN(20); {
		case n < 13:
			s.killRandom(r)
		case n < 17:
			if k, err := s.st.killConnections(ctx, r); err != nil {
				fmt.Fprintf(s.cfg.Log, "chaos: kill db connections: %v\n", err)
			} else if k > 0 {
				s.count(func(res *Result) { res.DBKills += k })
				fmt.Fprintf(s.cfg.Log, "chaos: terminated %d database connections\n", k)
			}
		default:
			if ok := s.tr.injectFault(r); ok {
				s.count(func(res *Result) { res.BrokerFaults++ })
			}
		}
	}
}

func jitter(r *rand.Rand, d time.Duration) time.Duration {
	return d/2 + time.Duration(r.Int64N(int64(d)))
}

// killRandom sends SIGKILL to a random running consumer.
func (s *supervisor) killRandom(r *rand.Rand) {
	s.mu.Lock()
	p := s.procs[r.IntN(len(s.procs))]
	s.mu.Unlock()
	if p == nil || p.cmd.Process == nil {
		return
	}
	select {
	case <-p.exited:
		return
	default:
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err == nil {
		s.count(func(r *Result) { r.Kills++; r.KillsAt["random-time"]++ })
		fmt.Fprintf(s.cfg.Log, "chaos: killed consumer %d\n", p.slot)
	}
}

// drain restarts every consumer without faults and waits, at most d, until
// done() reports the work finished.
func (s *supervisor) drain(ctx context.Context, d time.Duration, done func() bool) error {
	s.mu.Lock()
	s.faults = false
	s.mu.Unlock()
	// Replace the processes that run with faults armed. They are asked to
	// stop, so that they commit and leave the group rather than leave
	// dead members behind for the group to wait for; these are not chaos
	// kills, so they are not counted.
	for i := range s.procs {
		s.mu.Lock()
		p := s.procs[i]
		if p != nil {
			p.stopped = true
		}
		s.mu.Unlock()
		if p != nil {
			stopProc(p)
		}
		if err := s.start(ctx, i); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(d)
	for !done() {
		if time.Now().After(deadline) {
			return fmt.Errorf("consumers did not drain within %v", d)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return nil
}

// stopAll stops every consumer gracefully, then kills what remains.
func (s *supervisor) stopAll() {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		s.wg.Wait()
		return
	}
	s.stopped = true
	procs := append([]*proc(nil), s.procs...)
	s.mu.Unlock()
	for _, p := range procs {
		if p != nil {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, p := range procs {
		if p != nil {
			stopProc(p)
		}
	}
	s.wg.Wait()
}

// stopGrace is how long a consumer asked to stop has to finish its work,
// commit and leave before it is killed.
const stopGrace = 15 * time.Second

// stopProc asks p to stop with SIGTERM, kills it if it has not exited
// within stopGrace, and waits for it to exit.
func stopProc(p *proc) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(stopGrace)
	defer t.Stop()
	select {
	case <-p.exited:
	case <-t.C:
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.exited
	}
}
