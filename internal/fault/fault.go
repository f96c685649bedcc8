// Package fault holds the named fault points that crash tests use. The
// points are compiled into the real code path (the client's claim, commit
// and batch loop, the transport adapters' ack) and are off by default: a
// disarmed Inject is one atomic load.
//
// Two things arm them:
//   - ArmFromEnv, which the chaos and demo consumers call, reads
//     INBOX_FAULTS, a list such as "after-claim=0.02,mid-batch@3", and kills
//     the process with SIGKILL at a point with that probability per hit, or
//     at its n-th hit;
//   - WithHook, which in-process tests use to run a function at each point
//     reached with the returned context.
package fault

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Point names a place in the code path where a crash can be injected.
type Point string

// The fault points.
const (
	// AfterClaim is after a claim succeeded and before the handler runs.
	AfterClaim Point = "after-claim"
	// AfterEffectBeforeCommit is after the handler applied its side effect
	// and before the commit.
	AfterEffectBeforeCommit Point = "after-effect-before-commit"
	// AfterCommitBeforeAck is after the commit and before the broker ack.
	// The transport adapters, which own the ack, inject it.
	AfterCommitBeforeAck Point = "after-commit-before-ack"
	// MidBatch is between two messages' handlers inside a batch.
	MidBatch Point = "mid-batch"
	// EffectAfterStarted is inside Client.Effect, after the step was
	// recorded started (and committed) and before the remote call.
	EffectAfterStarted Point = "effect-after-started"
	// EffectAfterCall is inside Client.Effect, after the remote call
	// returned its result and before the step is recorded done.
	EffectAfterCall Point = "effect-after-call"
	// RelayAfterPublish is inside an outbox relay's round, after the broker
	// confirmed the batch and before the relay deletes its rows.
	RelayAfterPublish Point = "relay-after-publish"
	// OutboxAfterEnqueue is in a producer's business transaction, after it
	// enqueued its event and before it commits. The outbox's chaos
	// producers inject it.
	OutboxAfterEnqueue Point = "outbox-after-enqueue"
)

// Points lists every fault point.
var Points = []Point{AfterClaim, AfterEffectBeforeCommit, AfterCommitBeforeAck, MidBatch, EffectAfterStarted, EffectAfterCall, RelayAfterPublish, OutboxAfterEnqueue}

var (
	armed atomic.Bool
	mu    sync.Mutex
	env   map[Point]rule
)

// rule is when a point crashes the process: with a probability per hit, or
// at the n-th hit.
type rule struct {
	prob float64
	at   int
	hits int
}

type hookKey struct{}

// Inject runs the armed action for p: the hook in ctx, or a crash chosen by
// INBOX_FAULTS. It does nothing, at the cost of one atomic load, when
// nothing is armed.
func Inject(ctx context.Context, p Point) {
	if !armed.Load() {
		return
	}
	if h, ok := ctx.Value(hookKey{}).(func(Point)); ok {
		h(p)
	}
	mu.Lock()
	r, ok := env[p]
	crash := false
	if ok {
		r.hits++
		env[p] = r
		crash = (r.prob > 0 && rand.Float64() < r.prob) || r.hits == r.at
	}
	mu.Unlock()
	if crash {
		fmt.Fprintf(os.Stderr, "fault: crashing at %s\n", p)
		killSelf()
	}
}

// WithHook returns a context under which every fault point reached calls
// h, and arms the fault points for the process.
func WithHook(ctx context.Context, h func(Point)) context.Context {
	armed.Store(true)
	return context.WithValue(ctx, hookKey{}, h)
}

// ArmFromEnv arms the crashes that INBOX_FAULTS names: a comma-separated
// list of point=probability (crash at each hit with that probability) and
// point@n (crash at the n-th hit). It returns an error naming a malformed
// entry or an unknown point.
func ArmFromEnv() error {
	spec := os.Getenv("INBOX_FAULTS")
	if spec == "" {
		return nil
	}
	parsed := map[Point]rule{}
	for _, part := range strings.Split(spec, ",") {
		part = strings.TrimSpace(part)
		var name string
		var r rule
		if n, probText, ok := strings.Cut(part, "="); ok {
			prob, err := strconv.ParseFloat(probText, 64)
			if err != nil || prob < 0 || prob > 1 {
				return fmt.Errorf("INBOX_FAULTS: %q: probability must be between 0 and 1", part)
			}
			name, r.prob = n, prob
		} else if n, atText, ok := strings.Cut(part, "@"); ok {
			at, err := strconv.Atoi(atText)
			if err != nil || at < 1 {
				return fmt.Errorf("INBOX_FAULTS: %q: the hit to crash at must be a positive integer", part)
			}
			name, r.at = n, at
		} else {
			return fmt.Errorf("INBOX_FAULTS: %q: want point=probability or point@hit", part)
		}
		if !slices.Contains(Points, Point(name)) {
			return fmt.Errorf("INBOX_FAULTS: unknown fault point %q", name)
		}
		parsed[Point(name)] = r
	}
	mu.Lock()
	env = parsed
	mu.Unlock()
	armed.Store(true)
	return nil
}
