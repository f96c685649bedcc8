package inboxcli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxtype"
	"github.com/txinbox/inbox/internal/command"
	"github.com/txinbox/inbox/internal/duration"
)

// runPartitions is 'inbox partitions list|premake|drop': the day
// partitions of an inbox migrated with 'inbox migrate up --partitioned'.
func runPartitions(ctx context.Context, e *Env, args []string) error {
	const usage = "partitions list|premake|drop|adopt [flags]"
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
			fmt.Fprintln(e.Stdout, "Usage: inbox "+usage+"\n\n"+
				"  list     the partitions, the days they cover, their rows and size\n"+
				"  premake  make the partitions missing ahead (and, on an inbox with none, back)\n"+
				"  drop     drop the partitions older than --retention, counted from the ids' time\n"+
				"  adopt    move a plain inbox to the partitioned layout while consumers run\n\n"+
				"Run 'inbox partitions <subcommand> -h' for its flags.")
			return nil
		}
		return command.Usagef("want a subcommand: list, premake, drop or adopt")
	}
	sub, args := args[0], args[1:]
	switch sub {
	case "list":
		return runPartitionsList(ctx, e, args)
	case "premake", "drop":
		return runPartitionsMaintain(ctx, e, sub, args)
	case "adopt":
		return runPartitionsAdopt(ctx, e, args)
	default:
		return command.Usagef("unknown subcommand %q: want list, premake, drop or adopt", sub)
	}
}

// partitionedFlags are the store flags of the partitions commands, whose
// inbox is partitioned.
func partitionedFlags() *storeFlags {
	sf := &storeFlags{}
	sf.tables.Layout = inboxdriver.LayoutPartitioned
	return sf
}

// runPartitionsList is 'inbox partitions list'.
func runPartitionsList(ctx context.Context, e *Env, args []string) error {
	fs := command.NewFlags(e, "partitions list", "partitions list [--json] [flags]")
	sf := partitionedFlags()
	sf.register(fs)
	asJSON := fs.Bool("json", false, "print one JSON object")
	if err := fs.Parse(args, 0); err != nil {
		return err
	}
	return withAdmin(ctx, e, sf, nil, func(c *inbox.Admin) error {
		st, err := c.Partitions(ctx)
		if err != nil {
			return err
		}
		if *asJSON {
			return json.NewEncoder(e.Stdout).Encode(partitionsOut(st))
		}
		printPartitions(e.Stdout, st)
		return nil
	})
}

// runPartitionsMaintain is 'inbox partitions premake' and 'inbox
// partitions drop'.
func runPartitionsMaintain(ctx context.Context, e *Env, sub string, args []string) error {
	fs := command.NewFlags(e, "partitions "+sub, "partitions "+sub+" [--dry-run] [flags]")
	sf := partitionedFlags()
	sf.register(fs)
	premake := command.Duration{Value: inboxdriver.DefaultPartitionPremake}
	skew := command.Duration{Value: inboxdriver.DefaultPartitionMaxSkew}
	backfill := command.Duration{Value: inboxdriver.DefaultPartitionBackfill}
	retention := command.Duration{}
	horizon := command.Duration{Value: inbox.DefaultReplayHorizon}
	fs.Var(&skew, "max-skew", "how far producers' clocks may be from the database's (default 1d)")
	if sub == "premake" {
		fs.Var(&premake, "ahead", "make partitions this far ahead of the database's clock; at least --max-skew (default 7d)")
		fs.Var(&backfill, "backfill", "on an inbox with no partitions, reach this far back (default 30d)")
	} else {
		fs.Var(&retention, "retention", "drop the days whose ids are all older than this, by the ids' time: 30d, 36h (required)")
		fs.Var(&horizon, "replay-horizon", "refuse a retention shorter than this plus --max-skew: the longest you will replay (default 14d)")
	}
	dryRun := fs.Bool("dry-run", false, "say what would be made or dropped, and change nothing")
	if err := fs.Parse(args, 0); err != nil {
		return err
	}
	if sub == "premake" {
		if err := positive(map[string]time.Duration{"max-skew": skew.Value, "ahead": premake.Value, "backfill": backfill.Value}); err != nil {
			return err
		}
		if err := aheadOfSkew(premake.Value, skew.Value); err != nil {
			return err
		}
	} else {
		if !retention.Given {
			return command.Usagef("--retention is required")
		}
		if err := positive(map[string]time.Duration{"max-skew": skew.Value, "retention": retention.Value, "replay-horizon": horizon.Value}); err != nil {
			return err
		}
		// A drop makes no partitions: --ahead is premake's, and
		// only has to cover the skew for the store's checks.
		premake.Value = max(premake.Value, skew.Value)
	}
	sf.partitions = inboxdriver.PartitionConfig{Premake: premake.Value, MaxSkew: skew.Value, Backfill: backfill.Value}
	if err := sf.partitions.Validate(); err != nil {
		return command.Usagef("%v", err)
	}
	p := inboxtype.PartitionMaintainParams{Premake: sub == "premake", Drop: sub == "drop", DryRun: *dryRun}
	// The client's own retention only has to pass its checks: a drop
	// is refused by PartitionMaintain, which names the numbers.
	cfg := &inbox.Config{ReplayHorizon: horizon.Value, Retention: max(inbox.DefaultRetention, horizon.Value+skew.Value)}
	if sub == "drop" {
		p.Retention = retention.Value
		if err := inbox.CheckPartitionRetention(p.Retention, horizon.Value, skew.Value); err != nil {
			return command.Usagef("%w", &saidError{msg: fmt.Sprintf("--retention %s: shorter than the replay horizon %s plus the producers' clock skew %s (--max-skew): the partitioned inbox counts retention from the event's time, and a replay inside the horizon would find its day dropped",
				duration.Format(p.Retention), duration.Format(horizon.Value), duration.Format(skew.Value)), err: err})
		}
	}
	return withAdmin(ctx, e, sf, cfg, func(c *inbox.Admin) error {
		rep, err := c.PartitionMaintain(ctx, p)
		if err != nil {
			return err
		}
		printReport(e.Stdout, rep, *dryRun)
		return nil
	})
}

// runPartitionsAdopt is 'inbox partitions adopt'.
func runPartitionsAdopt(ctx context.Context, e *Env, args []string) error {
	fs := command.NewFlags(e, "partitions adopt", "partitions adopt [--dry-run] [--lock-timeout DURATION] [flags]")
	sf := partitionedFlags()
	sf.register(fs)
	premake := command.Duration{Value: inboxdriver.DefaultPartitionPremake}
	skew := command.Duration{Value: inboxdriver.DefaultPartitionMaxSkew}
	backfill := command.Duration{Value: inboxdriver.DefaultPartitionBackfill}
	lockTimeout := command.Duration{Value: inboxtype.DefaultAdoptLockTimeout}
	fs.Var(&premake, "ahead", "make partitions this far ahead of the database's clock (default 7d)")
	fs.Var(&skew, "max-skew", "how far producers' clocks may be from the database's (default 1d)")
	fs.Var(&backfill, "backfill", "make partitions this far back, for the ids the plain table holds: an older one is refused as expired, not skipped as a duplicate (default 31d: the retention, 30d, plus --max-skew)")
	fs.Var(&lockTimeout, "lock-timeout", "the longest each attempt at the switch waits for the claims open on the plain table, and so the longest a claim stalls (default 1s)")
	attempts := fs.Int("attempts", inboxtype.DefaultAdoptAttempts, "attempts at the switch, a second apart")
	dryRun := fs.Bool("dry-run", false, "say what would be done, and change nothing")
	if err := fs.Parse(args, 0); err != nil {
		return err
	}
	if *attempts < 1 {
		return command.Usagef("--attempts must be at least 1, got %d", *attempts)
	}
	if err := positive(map[string]time.Duration{"max-skew": skew.Value, "ahead": premake.Value, "backfill": backfill.Value, "lock-timeout": lockTimeout.Value}); err != nil {
		return err
	}
	if err := aheadOfSkew(premake.Value, skew.Value); err != nil {
		return err
	}
	sf.partitions = inboxdriver.PartitionConfig{Premake: premake.Value, MaxSkew: skew.Value}
	if backfill.Given {
		sf.partitions.Backfill = backfill.Value
	}
	if err := sf.partitions.Validate(); err != nil {
		return command.Usagef("%v", err)
	}
	cfg := &inbox.Config{ReplayHorizon: inbox.DefaultReplayHorizon, Retention: max(inbox.DefaultRetention, inbox.DefaultReplayHorizon+skew.Value)}
	p := inboxtype.PartitionAdoptParams{LockTimeout: lockTimeout.Value, Attempts: *attempts, DryRun: *dryRun}
	if backfill.Given {
		p.Backfill = backfill.Value
	}
	return withAdmin(ctx, e, sf, cfg, func(c *inbox.Admin) error {
		rep, err := c.PartitionAdopt(ctx, p)
		if err != nil {
			return err
		}
		printAdopt(e.Stdout, rep, *dryRun)
		return nil
	})
}

// aheadOfSkew refuses an --ahead shorter than --max-skew, naming both: an
// id stamped by a clock that runs ahead, within the skew, would find no
// partition.
func aheadOfSkew(ahead, skew time.Duration) error {
	if ahead < skew {
		return command.Usagef("--ahead %s is shorter than --max-skew %s: ids within the skew would find no partition", duration.Format(ahead), duration.Format(skew))
	}
	return nil
}

// partitionJSON is one partition in 'inbox partitions list --json' and
// 'inbox stats --json'.
type partitionJSON struct {
	Name string    `json:"name"`
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// State is attached, detaching (a detach left pending, which the next
	// maintenance finishes) or detached (left by a drop that stopped).
	State string `json:"state"`
	// Rows is the planner's estimate, -1 when never analysed.
	Rows  int64 `json:"rows"`
	Bytes int64 `json:"bytes"`
}

// partitionsJSON is the contract of 'inbox partitions list --json', and
// the partitions of 'inbox stats --json'.
type partitionsJSON struct {
	// Now is the database's clock.
	Now time.Time `json:"now"`
	// Oldest and Newest bound the ids' times the attached partitions take;
	// an id outside them is refused as expired or future.
	Oldest     time.Time       `json:"oldest"`
	Newest     time.Time       `json:"newest"`
	BackSecs   float64         `json:"back_s"`
	AheadSecs  float64         `json:"ahead_s"`
	Partitions []partitionJSON `json:"partitions"`
	// Frozen is the plain table of an inbox adopted into the partitioned
	// layout ('inbox partitions adopt'), while it is kept.
	Frozen *frozenJSON `json:"frozen,omitempty"`
}

// frozenJSON is the frozen plain table of an adopted inbox.
type frozenJSON struct {
	Name string `json:"name"`
	// Rows is the planner's estimate, -1 when never analysed.
	Rows  int64 `json:"rows"`
	Bytes int64 `json:"bytes"`
	// Consulted is true while claims look their ids up in it.
	Consulted bool `json:"consulted"`
}

func frozenOut(f *inboxtype.FrozenInbox) *frozenJSON {
	if f == nil {
		return nil
	}
	return &frozenJSON{Name: f.Name, Rows: f.Rows, Bytes: f.Bytes, Consulted: f.Consulted}
}

// frozenLine describes the frozen plain table of an adopted inbox.
func frozenLine(f *frozenJSON) string {
	rows := "~" + fmt.Sprint(f.Rows)
	if f.Rows < 0 {
		rows = "?"
	}
	consulted := "claims look ids up in it until maintenance that drops retires it"
	if !f.Consulted {
		consulted = "claims no longer consult it; the next maintenance that drops removes it"
	}
	return fmt.Sprintf("frozen plain table %s: %s rows, %s; %s", f.Name, rows, formatBytes(f.Bytes), consulted)
}

func printAdopt(w io.Writer, rep *inboxtype.PartitionAdoptReport, dryRun bool) {
	switch {
	case rep.Skipped:
		fmt.Fprintln(w, "skipped: another maintainer holds the lock (a cleaner, or another 'inbox partitions')")
		return
	case rep.AlreadyAdopted:
		fmt.Fprintf(w, "adopted already: the inbox is partitioned, and the plain table is frozen as %s\n", rep.Frozen)
	case dryRun:
		fmt.Fprintf(w, "would make the partitioned inbox beside the plain one, then rename the plain table to %s and the new one to the inbox's name\n", rep.Frozen)
		return
	default:
		fmt.Fprintf(w, "switched after %d attempt(s): the inbox is partitioned (%d partitions made), and the plain table is frozen as %s\n",
			rep.Attempts, len(rep.Created), rep.Frozen)
	}
	if rep.State != nil {
		out := partitionsOut(rep.State)
		fmt.Fprintln(w, coverage(out))
		if out.Frozen != nil {
			fmt.Fprintln(w, frozenLine(out.Frozen))
		}
	}
}

func partitionsOut(st *inboxtype.PartitionState) partitionsJSON {
	out := partitionsJSON{Now: st.Now.UTC(), Partitions: []partitionJSON{}, Frozen: frozenOut(st.Frozen)}
	out.Oldest, out.Newest = st.Range()
	if !out.Oldest.IsZero() {
		out.BackSecs = st.Now.Sub(out.Oldest).Seconds()
		out.AheadSecs = out.Newest.Sub(st.Now).Seconds()
	}
	for _, p := range st.Partitions {
		state := "attached"
		if p.DetachPending {
			state = "detaching"
		}
		out.Partitions = append(out.Partitions, partitionJSON{Name: p.Name, From: p.From, To: p.To, State: state, Rows: p.Rows, Bytes: p.Bytes})
	}
	for _, p := range st.Detached {
		out.Partitions = append(out.Partitions, partitionJSON{Name: p.Name, From: p.From, To: p.To, State: "detached", Rows: p.Rows, Bytes: p.Bytes})
	}
	return out
}

func printPartitions(w io.Writer, st *inboxtype.PartitionState) {
	out := partitionsOut(st)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION\tIDS FROM\tTO\tROWS\tSIZE\tSTATE")
	for _, p := range out.Partitions {
		rows := "~" + fmt.Sprint(p.Rows)
		if p.Rows < 0 {
			rows = "?"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", p.Name, p.From.Format(time.DateOnly), p.To.Format(time.DateOnly), rows, formatBytes(p.Bytes), p.State)
	}
	if len(out.Partitions) == 0 {
		fmt.Fprintln(tw, "(none)\t\t\t\t\t")
	}
	tw.Flush()
	fmt.Fprintln(w, coverage(out))
	if out.Frozen != nil {
		fmt.Fprintln(w, frozenLine(out.Frozen))
	}
}

// coverage says which ids' times the partitions take, on the database's
// clock.
func coverage(out partitionsJSON) string {
	if out.Oldest.IsZero() {
		return "no partition is attached: every claim is refused until 'inbox partitions premake' runs"
	}
	return fmt.Sprintf("ids from %s to %s are taken: %s back and %s ahead of the database's clock (%s)",
		out.Oldest.Format(time.DateOnly), out.Newest.Format(time.DateOnly),
		duration.Format(time.Duration(out.BackSecs)*time.Second), duration.Format(time.Duration(out.AheadSecs)*time.Second),
		out.Now.Format(time.RFC3339))
}

func printReport(w io.Writer, rep *inboxtype.PartitionMaintainReport, dryRun bool) {
	if rep.Skipped {
		fmt.Fprintln(w, "skipped: another maintainer holds the lock (a cleaner, or another 'inbox partitions')")
		return
	}
	verb := func(done, would string) string {
		if dryRun {
			return would
		}
		return done
	}
	list := func(what string, ps []inboxtype.Partition) {
		if len(ps) == 0 {
			return
		}
		names := make([]string, len(ps))
		for i, p := range ps {
			names[i] = p.Name
		}
		fmt.Fprintf(w, "%s %d: %s\n", what, len(ps), strings.Join(names, ", "))
	}
	list(verb("finished the pending detach of", "would finish the pending detach of"), rep.Finalized)
	list(verb("attached again", "would attach again"), rep.Reattached)
	list(verb("dropped", "would drop"), rep.Dropped)
	list(verb("made", "would make"), rep.Created)
	if rep.Retired != nil {
		fmt.Fprintf(w, "%s %s: none of its ids falls inside the partitions any more\n", verb("retired the frozen plain table", "would retire the frozen plain table"), rep.Retired.Name)
	}
	if len(rep.Finalized)+len(rep.Reattached)+len(rep.Dropped)+len(rep.Created) == 0 && rep.Retired == nil {
		fmt.Fprintln(w, "nothing to do")
	}
	if rep.State != nil && !dryRun {
		fmt.Fprintln(w, coverage(partitionsOut(rep.State)))
	}
}

// statsPartitions adds the partition state of a partitioned inbox to
// 'inbox stats'.
func statsPartitions(ctx context.Context, c *inbox.Admin, out *statsJSON) {
	st, err := c.Partitions(ctx)
	if err != nil {
		out.PartitionsError = command.OneLine(err.Error())
		return
	}
	p := partitionsOut(st)
	out.Partitions = &p
}

func printStatsPartitions(w io.Writer, out *statsJSON) {
	switch {
	case out.PartitionsError != "":
		fmt.Fprintf(w, "partitions: unknown (%s)\n", out.PartitionsError)
	case out.Partitions != nil:
		var detaching, detached int
		for _, p := range out.Partitions.Partitions {
			switch p.State {
			case "detaching":
				detaching++
			case "detached":
				detached++
			}
		}
		fmt.Fprintf(w, "partitions: %d attached; %s\n", len(out.Partitions.Partitions)-detaching-detached, coverage(*out.Partitions))
		if detaching+detached > 0 {
			fmt.Fprintf(w, "partitions left by an interrupted drop: %d detaching, %d detached; the next maintenance finishes them\n", detaching, detached)
		}
		if out.Partitions.Frozen != nil {
			fmt.Fprintln(w, frozenLine(out.Partitions.Frozen))
		}
	}
}
