package inboxcli

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// failoverURLFix says how to reach the primary, whichever server it is.
const failoverURLFix = "connect to the primary: name every server in the URL with target_session_attrs=read-write " +
	"(postgres://user@host1:5432,host2:5432/db?target_session_attrs=read-write), and the consumers find the primary after a failover too"

// asyncLoss is what a probe measured: docs/PRODUCTION.md, "Failover".
const asyncLoss = "a probe with the link cut a few seconds before the primary's crash lost 2,779 of 20,000 acknowledged messages, " +
	"the inbox row and the effect together, and the broker never delivers them again"

// checkReplication judges the server's replication: a standby fails,
// asynchronous standbys and a single synchronous one warn.
func (d *doctor) checkReplication(ctx context.Context) {
	r, err := d.s.catalog.Replication(ctx)
	if errors.Is(err, errors.ErrUnsupported) {
		d.set("replication", checkSkip, "replication is read on Postgres only", "")
		return
	}
	if err != nil {
		d.set("replication", checkFail, "cannot read the replication: "+errText(err), "")
		return
	}
	if r.InRecovery {
		d.set("replication", checkFail, "connected to a standby (pg_is_in_recovery()): it is read-only, and no consumer can commit through this URL", failoverURLFix)
		return
	}
	var sync, async, unknown []string
	for _, s := range r.Standbys {
		switch s.SyncState {
		case "sync", "quorum", "potential":
			sync = append(sync, s.Name)
		case "async":
			async = append(async, s.Name)
		default:
			unknown = append(unknown, s.Name)
		}
	}
	waits := r.SynchronousCommit != "off" && r.SynchronousCommit != "local"
	need := syncNeeded(r.SynchronousStandbyNames)
	switch {
	case len(unknown) > 0:
		d.set("replication", checkWarn, fmt.Sprintf("%d standbys stream from this primary, but this role may not read whether they are synchronous", len(r.Standbys)),
			"run doctor as a role with pg_monitor (or pg_read_all_stats)")
	case need > 0 && len(sync) < need:
		d.set("replication", checkFail, fmt.Sprintf("synchronous_standby_names is %q, but %d of the %d synchronous standbys it needs are connected: every commit waits, with no error",
			r.SynchronousStandbyNames, len(sync), need),
			"bring the standby back, or name a standby that is connected; set a commit timeout so that a stalled commit surfaces")
	case len(r.Standbys) == 0:
		d.set("replication", checkOK, "a primary with no streaming standby", "")
	case len(sync) == 0 || !waits:
		names := strings.Join(append(async, sync...), ", ")
		why := "are asynchronous"
		if len(sync) > 0 {
			why = fmt.Sprintf("are not waited for: synchronous_commit is %s", r.SynchronousCommit)
		}
		d.set("replication", checkWarn, fmt.Sprintf("the standbys (%s) %s: a failover to one loses the commits it had not received, acknowledged messages included; %s", names, why, asyncLoss),
			"set synchronous_standby_names to name the standbys (ANY 1 (s1, s2) with two) and keep synchronous_commit on")
	case len(sync) <= need:
		d.set("replication", checkWarn, fmt.Sprintf("commits wait for %s, and no other standby can take its place: if it goes, every commit waits, with no error", strings.Join(sync, ", ")),
			"run two standbys and set synchronous_standby_names to ANY 1 (s1, s2); set a commit timeout so that a stalled commit surfaces")
	default:
		d.set("replication", checkOK, fmt.Sprintf("commits wait for %d of the synchronous standbys %s (synchronous_standby_names %q)", need, strings.Join(sync, ", "), r.SynchronousStandbyNames), "")
	}
}

// syncNeeded is how many synchronous standbys synchronous_standby_names
// makes a commit wait for: 0 when it is empty, else the N of "FIRST N (…)",
// "ANY N (…)" or "N (…)", and 1 for a plain list.
func syncNeeded(names string) int {
	s := strings.TrimSpace(names)
	if s == "" {
		return 0
	}
	fields := strings.Fields(s)
	if w := strings.ToUpper(fields[0]); (w == "ANY" || w == "FIRST") && len(fields) > 1 {
		s = strings.Join(fields[1:], " ")
	}
	num, _, ok := strings.Cut(s, "(")
	if !ok {
		return 1
	}
	n, err := strconv.Atoi(strings.TrimSpace(num))
	if err != nil || n < 1 {
		return 1
	}
	return n
}
