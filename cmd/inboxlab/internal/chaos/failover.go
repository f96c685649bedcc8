package chaos

import (
	"context"
	"fmt"
	"time"

	"github.com/txinbox/inbox/internal/pgcluster"
	"github.com/txinbox/inbox/internal/transportkit"
)

// The values of Config.Failover.
const (
	FailoverSync  = "sync"
	FailoverAsync = "async"
)

// failoverLead is how long before the primary's crash the replication
// link is cut: the primary commits alone meanwhile, as in a partition that
// precedes a crash. It is shortened to a fifth of a short run.
const failoverLead = 5 * time.Second

// failover fails the cluster over once, two fifths into the run: it cuts
// the replication link, kills the primary with SIGKILL failoverLead later
// and promotes the replica, and counts the promotion in sup's result. It
// gives up, with no failover, if ctx ends first.
//
// While the link is cut, the kill schedule pauses, so that the consumers
// run as they would through a partition (the commits of the primary alone
// are then acknowledged, and lost with asynchronous replication, in every
// run, not only those where no rebalance stalled the consumers), and
// above all no database connection is terminated: a terminated wait for a
// synchronous standby leaves the commit visible on the primary alone,
// where a redelivery reads it as a duplicate and acks it (see
// docs/PRODUCTION.md), which is a fault of its own, not the partition this
// models.
func failover(ctx context.Context, cfg *Config, cl *pgcluster.Cluster, sup *supervisor) {
	if !transportkit.Sleep(ctx, cfg.Duration*2/5) {
		return
	}
	sup.pauseKills(true)
	defer sup.pauseKills(false)
	cl.CutReplication()
	lead := min(failoverLead, cfg.Duration/5)
	fmt.Fprintf(cfg.Log, "chaos: cut the replication link; the primary dies in %v\n", lead)
	if !transportkit.Sleep(ctx, lead) {
		return
	}
	problem := func(err error) {
		sup.count(func(r *Result) { r.Problems = append(r.Problems, err.Error()) })
	}
	if err := cl.KillPrimary(); err != nil {
		problem(err)
		return
	}
	fmt.Fprintf(cfg.Log, "chaos: killed the primary with SIGKILL; promoting the replica\n")
	start := time.Now()
	// Bounded by Promote; a run that ends meanwhile still gets its
	// primary.
	if err := cl.Promote(context.WithoutCancel(ctx)); err != nil {
		problem(err)
		return
	}
	sup.count(func(r *Result) { r.Failovers++ })
	fmt.Fprintf(cfg.Log, "chaos: the replica is the primary, promoted in %v\n", time.Since(start).Round(time.Millisecond))
}

// failoverCause names why acknowledged events are missing after a
// failover: with asynchronous replication, the commits that the replica
// had not received when the primary died.
func failoverCause(mode string, lost int) string {
	switch {
	case lost == 0:
		return ""
	case mode == FailoverAsync:
		return "acknowledged messages lost on failover: replication was asynchronous"
	}
	return "acknowledged messages lost on failover, although replication was synchronous"
}
