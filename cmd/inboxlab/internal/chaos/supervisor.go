package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/cmd/inboxlab/internal/child"
)

// supervisor runs the consumer processes: it starts them, restarts those
// that die, kills them on schedule, and counts what their output reports.
//
// Every wait in it is bounded. A consumer asked to stop gets stopGrace, then
// SIGKILL; a process is reaped at most reapDelay after it exits, even when
// something it started still holds its stdout or stderr; and stopAll gives
// up on a process that outlives all that, reporting it as a problem.
type supervisor struct {
	cfg  *Config
	args []string // the consumers' arguments, after --slot
	res  *Result

	// stopGrace is how long a consumer asked to stop has to finish its
	// work, commit and leave before it is killed. Defaults to the
	// constant.
	stopGrace time.Duration

	// slotMu serialises the (re)starts of each slot, so that a restart
	// after a kill and the drain's replacement never both start a process
	// for the same slot.
	slotMu []sync.Mutex

	mu     sync.Mutex
	procs  []*proc            // the process of each slot
	live   map[*proc]struct{} // every process started and not yet reaped
	faults bool               // start new processes with INBOX_FAULTS
	// paused pauses the kill schedule (see failover).
	paused  bool
	stopped bool
	wg      sync.WaitGroup // the goroutines that reap processes
}

// proc is one consumer process.
type proc struct {
	slot int
	cmd  *exec.Cmd
	// exited is closed once the process has been reaped.
	exited chan struct{}
	// done is closed once its reaper has also counted its end and decided
	// on a restart.
	done chan struct{}
	// stopped says that the supervisor asked it to stop: its end is not a
	// kill and it is not restarted. Guarded by supervisor.mu.
	stopped bool
}

// The kill schedule: one action every killEvery on average, and a fault
// probability per hit that, at the rates the consumers run, adds a few
// self-kills at named points per minute.
const (
	killEvery = 1500 * time.Millisecond
	// minKills is the fewest consumer kills a run makes: past half its
	// duration, a run with fewer kills only kills.
	minKills     = 5
	faultPerHit  = 0.0015
	restartDelay = 100 * time.Millisecond
)

// Bounds of the waits on a consumer process.
const (
	// stopGrace is the default of supervisor.stopGrace: the consumers'
	// own shutdown timeouts are shorter.
	stopGrace = 15 * time.Second
	// reapDelay bounds how long the reaper waits, once a process has
	// exited, for its stdout and stderr to close: a process it started
	// may still hold them (exec.Cmd.WaitDelay).
	reapDelay = 2 * time.Second
	// killWait is how long a process may take to be reaped after SIGKILL.
	killWait = reapDelay + 3*time.Second
)

func newSupervisor(cfg *Config, args []string, res *Result) *supervisor {
	return &supervisor{
		cfg: cfg, args: args, res: res, stopGrace: stopGrace,
		slotMu: make([]sync.Mutex, cfg.Consumers),
		procs:  make([]*proc, cfg.Consumers),
		live:   map[*proc]struct{}{},
		faults: true,
	}
}

func (s *supervisor) startAll(ctx context.Context) error {
	for i := range s.procs {
		s.slotMu[i].Lock()
		_, err := s.start(ctx, i)
		s.slotMu[i].Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

// start starts a consumer in slot i and makes it the slot's process. The
// caller holds slotMu[i]. It starts nothing, and returns nil, once the
// supervisor is stopping.
func (s *supervisor) start(ctx context.Context, i int) (*proc, error) {
	s.mu.Lock()
	stopping, faults := s.stopped, s.faults
	s.mu.Unlock()
	if stopping {
		return nil, nil
	}
	args := append([]string{"--slot", fmt.Sprint(i)}, s.args...)
	cmd := s.cfg.Command(args)
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, "INBOX_CHAOS_SLOT="+fmt.Sprint(i))
	if faults {
		cmd.Env = append(cmd.Env, "INBOX_FAULTS="+faultSpec(faultPerHit))
	}
	// A consumer dies with the coordinator, whatever ends it.
	child.DieWithParent(cmd)
	// The output goes through pipes that exec copies from; Wait returns
	// at most reapDelay after the process exits, even if a process it
	// started still holds them.
	stdout := &lineWriter{line: s.readOutcome}
	cmd.Stdout = stdout
	var lastFault, lastLine string
	var poisoned bool
	stderr := &lineWriter{line: func(line string) {
		lastLine = line
		if pt, ok := strings.CutPrefix(line, "fault: crashing at "); ok {
			lastFault = pt
			return
		}
		if strings.HasPrefix(line, crashPoisonLine) {
			poisoned = true
		}
		fmt.Fprintf(s.cfg.Log, "consumer %d: %s\n", i, line)
	}}
	cmd.Stderr = stderr
	cmd.WaitDelay = reapDelay
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start consumer %d: %w", i, err)
	}
	p := &proc{slot: i, cmd: cmd, exited: make(chan struct{}), done: make(chan struct{})}
	s.mu.Lock()
	s.procs[i] = p
	s.live[p] = struct{}{}
	// A stop that began while this process was starting did not see it:
	// stop it here.
	if s.stopped {
		p.stopped = true
		_ = cmd.Process.Signal(syscall.SIGKILL)
	}
	// Counted under the lock that stopAll sets stopped under, so that it
	// waits for this reaper too. (A start that runs while stopAll waits is
	// a restart, in a reaper that is itself still counted.)
	s.wg.Add(1)
	s.mu.Unlock()

	go func() {
		defer s.wg.Done()
		defer close(p.done)
		err := cmd.Wait()
		stdout.flush()
		stderr.flush()
		s.mu.Lock()
		delete(s.live, p)
		stopping := s.stopped || p.stopped
		s.mu.Unlock()
		close(p.exited)
		if stopping {
			return
		}
		if lastFault != "" {
			s.count(func(r *Result) { r.Kills++; r.KillsAt[lastFault]++ })
			fmt.Fprintf(s.cfg.Log, "chaos: consumer %d killed itself at %s\n", i, lastFault)
		} else if poisoned {
			s.count(func(r *Result) { r.PoisonCrashes++ })
			fmt.Fprintf(s.cfg.Log, "chaos: a crash-poison event took consumer %d down\n", i)
		} else if !killedBySignal(err) {
			s.count(func(r *Result) {
				p := fmt.Sprintf("consumer %d exited on its own: %v", i, err)
				if lastLine != "" {
					// What it said last says why: a refused login, a
					// missing table.
					p += " (" + lastLine + ")"
				}
				r.Problems = append(r.Problems, p)
			})
		}
		s.restart(ctx, p)
	}()
	return p, nil
}

func killedBySignal(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled()
}

// restart starts the slot of p, which died, again after a short delay,
// unless the run is stopping or p is no longer the slot's process: the
// drain may have replaced it meanwhile.
func (s *supervisor) restart(ctx context.Context, p *proc) {
	t := time.NewTimer(restartDelay)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return
	case <-t.C:
	}
	i := p.slot
	s.slotMu[i].Lock()
	defer s.slotMu[i].Unlock()
	s.mu.Lock()
	current := !s.stopped && !p.stopped && s.procs[i] == p
	s.mu.Unlock()
	if !current {
		return
	}
	q, err := s.start(ctx, i)
	switch {
	case err != nil:
		s.count(func(r *Result) { r.Problems = append(r.Problems, err.Error()) })
	case q != nil:
		s.count(func(r *Result) { r.Restarts++ })
	}
}

// readOutcome counts a line that a consumer's observer printed:
// "tx APPLIED DUPLICATES" or "dead ID REASON".
func (s *supervisor) readOutcome(line string) {
	switch {
	case strings.HasPrefix(line, "tx "):
		var applied, dups int
		if _, err := fmt.Sscanf(line, "tx %d %d", &applied, &dups); err == nil && dups > 0 {
			s.count(func(r *Result) { r.DuplicatesSkipped += dups })
		}
	case strings.HasPrefix(line, "dead ") && strings.HasSuffix(line, " "+inbox.ReasonCrashedConsumer):
		// A crash-poison event, as it must be; the check at the end
		// makes sure that it is one (tally).
	case strings.HasPrefix(line, "dead "):
		s.count(func(r *Result) { r.Problems = append(r.Problems, "dead-lettered: "+line) })
	}
}

// pauseKills pauses the kill schedule, or resumes it. The consumers'
// own fault points stay armed.
func (s *supervisor) pauseKills(on bool) {
	s.mu.Lock()
	s.paused = on
	s.mu.Unlock()
}

func (s *supervisor) killsPaused() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.paused
}

func (s *supervisor) count(f func(r *Result)) {
	s.mu.Lock()
	f(s.res)
	s.mu.Unlock()
}

// chaos runs the kill schedule until ctx is done or done() reports the
// work finished: it kills consumers, terminates st's connections and makes
// tr fail requests.
func (s *supervisor) chaos(ctx context.Context, r *rand.Rand, st store, tr *transport, done func() bool) {
	tick := time.NewTicker(killEvery / 3)
	defer tick.Stop()
	next := time.Now().Add(jitter(r, killEvery))
	// Every run faults its broker at least once where the transport can:
	// drawn at 3 in 20 per event, a 20-second run would go without in
	// about one run in eight. Past half the duration, the next event is a
	// broker fault if none has been tried.
	half := time.Now().Add(s.cfg.Duration / 2)
	brokerTried := false
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
		if s.killsPaused() {
			continue
		}
		n := r.IntN(20)
		var kills int
		s.count(func(res *Result) { kills = res.Kills })
		switch {
		case !brokerTried && time.Now().After(half):
			n = 19
		case kills < minKills && time.Now().After(half):
			// Past half the run with fewer kills than a run must have
			// (a loaded machine, or an unlucky draw): kill next.
			n = 0
		}
		switch {
		case n < 13:
			s.killRandom(r)
		case n < 17:
			if k, err := st.killConnections(ctx, r); err != nil {
				fmt.Fprintf(s.cfg.Log, "chaos: kill db connections: %v\n", err)
			} else if k > 0 {
				s.count(func(res *Result) { res.DBKills += k })
				fmt.Fprintf(s.cfg.Log, "chaos: terminated %d database connections\n", k)
			}
		default:
			brokerTried = true
			if ok := tr.injectFault(r); ok {
				s.count(func(res *Result) { res.BrokerFaults++ })
			}
		}
	}
}

func jitter(r *rand.Rand, d time.Duration) time.Duration {
	return d/2 + time.Duration(r.Int64N(int64(d)))
}

// killRandom sends SIGKILL to a random running consumer. It draws among
// those still running, so that a loaded machine, where restarts are slow,
// does not turn a scheduled kill into none.
func (s *supervisor) killRandom(r *rand.Rand) {
	s.mu.Lock()
	live := make([]*proc, 0, len(s.procs))
	for _, p := range s.procs {
		if p == nil {
			continue
		}
		select {
		case <-p.exited:
		default:
			live = append(live, p)
		}
	}
	s.mu.Unlock()
	if len(live) == 0 {
		return
	}
	p := live[r.IntN(len(live))]
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err == nil {
		s.count(func(r *Result) { r.Kills++; r.KillsAt["random-time"]++ })
		fmt.Fprintf(s.cfg.Log, "chaos: killed consumer %d\n", p.slot)
	}
}

// drainCap bounds a drain that keeps making headway: it ends after
// drainCap times its stall window in all, however slowly the consumers
// go on.
const drainCap = 4

// drain replaces every consumer with one that runs without faults, then
// waits until check reports the work done. check also reports how far the
// work has come (a count that only grows); the drain fails when that
// count has not moved for the stall window, or after drainCap times the
// window in all. A loaded machine makes a drain slow, not lossy: an event
// applied late is not lost, so the window runs from the last headway, not
// from the start. The replacements take stopGrace and killWait at most,
// all at once, before the wait begins.
func (s *supervisor) drain(ctx context.Context, stall time.Duration, check func(ctx context.Context) (done bool, progress int)) error {
	s.mu.Lock()
	s.faults = false
	s.mu.Unlock()
	// Replace the processes that run with faults armed. They are asked to
	// stop, so that they commit and leave the group rather than leave
	// dead members behind for the group to wait for; these are not chaos
	// kills, so they are not counted. A Kafka consumer may take seconds
	// to leave, if it is in the middle of joining: they leave together.
	var wg sync.WaitGroup
	errs := make([]error, len(s.procs))
	for i := range s.procs {
		wg.Go(func() { errs[i] = s.replace(ctx, i) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	start := time.Now()
	last, moved := -1, start
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		done, progress := check(ctx)
		if done {
			return nil
		}
		now := time.Now()
		if progress > last {
			last, moved = progress, now
		}
		switch {
		case now.Sub(moved) >= stall:
			return fmt.Errorf("consumers did not drain: nothing more applied for %v", stall)
		case now.Sub(start) >= drainCap*stall:
			return fmt.Errorf("consumers did not drain within %v, though still applying", drainCap*stall)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// replace stops the process of slot i and starts another in its place.
func (s *supervisor) replace(ctx context.Context, i int) error {
	s.slotMu[i].Lock()
	defer s.slotMu[i].Unlock()
	s.mu.Lock()
	p := s.procs[i]
	if p != nil {
		p.stopped = true
	}
	s.mu.Unlock()
	if p != nil {
		start := time.Now()
		if err := stopProc(p, s.stopGrace); err != nil {
			s.count(func(r *Result) { r.Problems = append(r.Problems, err.Error()) })
		}
		fmt.Fprintf(s.cfg.Log, "chaos: consumer %d stopped in %v\n", i, time.Since(start).Round(time.Millisecond))
	}
	_, err := s.start(ctx, i)
	return err
}

// stopAll stops every consumer: SIGTERM, stopGrace for them to finish,
// then SIGKILL for those that did not. It returns once every process has
// been reaped, or has been given up on after killWait more.
func (s *supervisor) stopAll() { s.stopAllWithin(s.stopGrace) }

// stopAllWithin is stopAll with grace for stopGrace, and returns how many
// consumers it stopped.
func (s *supervisor) stopAllWithin(grace time.Duration) int {
	s.mu.Lock()
	s.stopped = true
	live := make([]*proc, 0, len(s.live))
	for p := range s.live {
		p.stopped = true
		live = append(live, p)
	}
	s.mu.Unlock()
	for _, p := range live {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	over := time.NewTimer(grace)
	defer over.Stop()
	for _, p := range live {
		select {
		case <-p.exited:
		case <-over.C:
			// Close it again for the next ones: the grace is over.
			over.Reset(0)
		}
	}
	kill := time.NewTimer(killWait)
	defer kill.Stop()
	for _, p := range live {
		select {
		case <-p.exited:
			continue
		default:
		}
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		select {
		case <-p.exited:
		case <-kill.C:
			kill.Reset(0)
			s.count(func(r *Result) {
				r.Problems = append(r.Problems, fmt.Sprintf("consumer %d (pid %d) was not reaped within %v of SIGKILL", p.slot, p.cmd.Process.Pid, killWait))
			})
		}
	}
	// The reapers of the processes reaped above end at once: a stopped
	// supervisor restarts nothing. One that outlived the kill is left.
	reaped := make(chan struct{})
	go func() { s.wg.Wait(); close(reaped) }()
	select {
	case <-reaped:
	case <-kill.C:
	}
	return len(live)
}

// stopProc asks p to stop with SIGTERM, kills it if it has not exited
// within grace, and waits for it to be reaped, killWait at most.
func stopProc(p *proc, grace time.Duration) error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(max(grace, 0))
	defer t.Stop()
	select {
	case <-p.exited:
		return nil
	case <-t.C:
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	t.Reset(killWait)
	select {
	case <-p.exited:
		return nil
	case <-t.C:
		return fmt.Errorf("consumer %d (pid %d) was not reaped within %v of SIGKILL", p.slot, p.cmd.Process.Pid, killWait)
	}
}

// lineWriter calls line for each line written to it. exec copies a
// process's output to it from one goroutine.
type lineWriter struct {
	line func(string)
	buf  []byte
}

// maxLine bounds a line that never ends: it is passed on in pieces.
const maxLine = 64 << 10

func (w *lineWriter) Write(b []byte) (int, error) {
	w.buf = append(w.buf, b...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.line(string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) >= maxLine {
		w.flush()
	}
	return len(b), nil
}

// flush passes on the end of the output that no newline ended.
func (w *lineWriter) flush() {
	if len(w.buf) > 0 {
		w.line(string(w.buf))
		w.buf = nil
	}
}
