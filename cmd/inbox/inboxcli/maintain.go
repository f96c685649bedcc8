package inboxcli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxtype"
	"github.com/txinbox/inbox/internal/command"
	"github.com/txinbox/inbox/internal/duration"
)

func runPurge(ctx context.Context, e *Env, args []string) error {
	fs := command.NewFlags(e, "purge", "purge --older-than DURATION [--batch N] [--dry-run] [flags]")
	var sf storeFlags
	sf.register(fs)
	var olderThan command.Duration
	horizon := command.Duration{Value: inbox.DefaultReplayHorizon}
	fs.Var(&olderThan, "older-than", "delete rows processed longer ago than this: 30d, 36h, 1d12h (required)")
	fs.Var(&horizon, "replay-horizon", "refuse a window shorter than this: the longest you will replay (default 14d)")
	batch := fs.Int("batch", inbox.DefaultPurgeBatchSize, "rows per DELETE")
	consumer := fs.String("consumer", "", "purge only this consumer's rows")
	dryRun := fs.Bool("dry-run", false, "count the rows that would be deleted, and delete none")
	if err := fs.Parse(args, 0); err != nil {
		return err
	}
	if !olderThan.Given {
		return command.Usagef("--older-than is required")
	}
	if err := positive(map[string]time.Duration{"older-than": olderThan.Value, "replay-horizon": horizon.Value}); err != nil {
		return err
	}
	if *batch <= 0 {
		return command.Usagef("--batch %d: must be positive", *batch)
	}
	if *consumer != "" {
		if err := checkConsumer(*consumer); err != nil {
			return err
		}
	}
	// A window inside the replay horizon is refused before any database
	// is reached, as the other mistakes of the command line are.
	if err := inbox.CheckPurgeWindow(olderThan.Value, horizon.Value); err != nil {
		return command.Usagef("%w", &saidError{msg: fmt.Sprintf("--older-than %s: refused: the replay horizon is %s, and a replayed message inside it would look new and be applied again",
			duration.Format(olderThan.Value), duration.Format(horizon.Value)), err: err})
	}
	cfg := &inbox.Config{ReplayHorizon: horizon.Value, Retention: max(horizon.Value, inbox.DefaultRetention)}
	return withAdmin(ctx, e, &sf, cfg, func(c *inbox.Admin) error {
		return purge(ctx, e, c, olderThan.Value, *consumer, *batch, *dryRun)
	})
}

// positive refuses, naming the flag, a duration flag that is zero: a
// window, horizon, retention or skew of zero would let a purge or a drop
// reach every row, or be read by the library as its default. (A negative
// one is refused as the flag is parsed.)
func positive(flags map[string]time.Duration) error {
	for _, name := range slices.Sorted(maps.Keys(flags)) {
		if flags[name] <= 0 {
			return command.Usagef("--%s %v: must be positive", name, flags[name])
		}
	}
	return nil
}

func purge(ctx context.Context, e *Env, c *inbox.Admin, olderThan time.Duration, consumer string, batch int, dryRun bool) error {
	p := inbox.PurgeParams{OlderThan: olderThan, Consumer: consumer, BatchSize: batch}
	window := duration.Format(olderThan)
	if dryRun {
		p.DryRun = true
		n, err := c.Purge(ctx, p)
		if err != nil {
			return err
		}
		fmt.Fprintf(e.Stdout, "would purge %s older than %s\n", command.Count(n, "row", "rows"), window)
		return nil
	}
	if isTerminal(e.Stdout) {
		total, err := c.Purge(ctx, inbox.PurgeParams{OlderThan: p.OlderThan, Consumer: p.Consumer, DryRun: true})
		if err != nil {
			return err
		}
		start := time.Now()
		p.Progress = func(n int64) { drawProgress(e.Stdout, n, total, start) }
	}
	n, err := c.Purge(ctx, p)
	if p.Progress != nil {
		fmt.Fprintln(e.Stdout)
	}
	if err != nil && ctx.Err() != nil {
		// Each batch commits on its own: what was purged stays purged.
		fmt.Fprintf(e.Stderr, "stopped after purging %s older than %s; run it again to purge the rest\n", command.Count(n, "row", "rows"), window)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(e.Stdout, "purged %s older than %s\n", command.Count(n, "row", "rows"), window)
	return nil
}

// drawProgress redraws a one-line progress bar.
func drawProgress(w io.Writer, done, total int64, start time.Time) {
	const width = 30
	frac := 1.0
	if total > 0 {
		frac = min(float64(done)/float64(total), 1)
	}
	filled := int(frac * width)
	bar := make([]byte, width)
	for i := range bar {
		bar[i] = '.'
		if i < filled {
			bar[i] = '#'
		}
	}
	rate := float64(done) / max(time.Since(start).Seconds(), 0.001)
	fmt.Fprintf(w, "\r[%s] %d/%d rows %3.0f%% %.0f rows/s", bar, done, total, frac*100, rate)
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func runForget(ctx context.Context, e *Env, args []string) error {
	fs := command.NewFlags(e, "forget", "forget --consumer C --id ID [--dry-run] [flags]")
	var sf storeFlags
	sf.register(fs)
	consumer := fs.String("consumer", "", "the consumer whose row to delete (required)")
	id := fs.String("id", "", "the message id (required)")
	dryRun := fs.Bool("dry-run", false, "say what would be deleted, and delete nothing")
	if err := fs.Parse(args, 0); err != nil {
		return err
	}
	if *consumer == "" || *id == "" {
		return command.Usagef("--consumer and --id are required")
	}
	if err := checkConsumer(*consumer); err != nil {
		return err
	}
	return withAdmin(ctx, e, &sf, nil, func(c *inbox.Admin) error {
		// The id is checked against the store's id column, once read.
		if _, err := c.Config().IDFormat.CanonicalID(*id); err != nil {
			return command.Usagef("%w", &saidError{msg: fmt.Sprintf("--id %q: not a %s, as the store's ids are", *id, strings.ToUpper(c.Config().IDFormat.String())), err: err})
		}
		// Say what it deletes: with --dry-run, instead.
		n, err := c.ForgetCount(ctx, *consumer, *id)
		if err != nil {
			return forgetErr(*consumer, *id, err)
		}
		what := fmt.Sprintf("%s of %s/%s", command.Count(n.InboxRows, "inbox row", "inbox rows"), *consumer, *id)
		if n.Effects > 0 {
			what += " and " + command.Count(n.Effects, "effect-ledger entry", "effect-ledger entries")
		}
		if *dryRun {
			fmt.Fprintf(e.Stdout, "would delete %s: its next delivery would apply again\n", what)
			return nil
		}
		if err := c.Forget(ctx, *consumer, *id); err != nil {
			return forgetErr(*consumer, *id, err)
		}
		fmt.Fprintf(e.Stdout, "deleted %s: its next delivery applies again\n", what)
		return nil
	})
}

// forgetErr says that there is nothing to forget of consumer's message id,
// or returns err.
func forgetErr(consumer, id string, err error) error {
	if errors.Is(err, inbox.ErrNotFound) {
		return &saidError{msg: fmt.Sprintf("%s/%s: not found: no inbox row and no effect-ledger entry", consumer, id), err: err}
	}
	return err
}

// statsJSON is the contract of 'inbox stats --json'.
type statsJSON struct {
	Consumers []consumerJSON `json:"consumers"`
	// TableBytes is the inbox table's size with its indexes, -1 if unknown.
	TableBytes int64 `json:"table_bytes"`
	// StuckAfterSecs is the --stuck-after threshold.
	StuckAfterSecs float64 `json:"stuck_after_s"`
	// StuckEffects are the effect steps started before the threshold and
	// never recorded done, oldest first, at most stuckEffectsLimit.
	StuckEffects []stuckEffectJSON `json:"stuck_effects"`
	// StuckEffectsMore is true when there are more than those listed.
	StuckEffectsMore bool `json:"stuck_effects_more"`
	// StuckEffectsError says why the ledger could not be read, if it
	// could not (a store without a ledger, a schema not migrated to 003).
	StuckEffectsError string `json:"stuck_effects_error,omitempty"`
	// Partitions are those of a partitioned inbox; absent for a plain one.
	Partitions *partitionsJSON `json:"partitions,omitempty"`
	// PartitionsError says why they could not be read.
	PartitionsError string `json:"partitions_error,omitempty"`
}

type stuckEffectJSON struct {
	Consumer       string    `json:"consumer"`
	MessageID      string    `json:"message_id"`
	Step           string    `json:"step"`
	Attempts       int       `json:"attempts"`
	StartedAt      time.Time `json:"started_at"`
	StartedAgeSecs float64   `json:"started_age_s"`
}

// defaultStuckAfter is the default of 'inbox stats --stuck-after'.
const defaultStuckAfter = 5 * time.Minute

// stuckEffectsLimit bounds the stuck steps 'inbox stats' lists.
const stuckEffectsLimit = 50

type consumerJSON struct {
	Consumer      string    `json:"consumer"`
	Rows          int64     `json:"rows"`
	Oldest        time.Time `json:"oldest"`
	OldestAgeSecs float64   `json:"oldest_age_s"`
	Newest        time.Time `json:"newest"`
}

func runStats(ctx context.Context, e *Env, args []string) error {
	fs := command.NewFlags(e, "stats", "stats [--json] [--stuck-after DURATION] [flags]")
	var sf storeFlags
	sf.register(fs)
	asJSON := fs.Bool("json", false, "print one JSON object")
	stuckAfter := command.Duration{Value: defaultStuckAfter}
	fs.Var(&stuckAfter, "stuck-after", "list remote-effect steps started longer ago than this and never recorded done (default 5m)")
	if err := fs.Parse(args, 0); err != nil {
		return err
	}
	return withAdmin(ctx, e, &sf, nil, func(c *inbox.Admin) error {
		return stats(ctx, e, c, stuckAfter.Value, *asJSON, sf.tables.Layout == inboxdriver.LayoutPartitioned)
	})
}

func stats(ctx context.Context, e *Env, c *inbox.Admin, stuckAfter time.Duration, asJSON, partitioned bool) error {
	st, err := c.Stats(ctx)
	if err != nil {
		return err
	}
	now := time.Now()
	out := statsJSON{Consumers: []consumerJSON{}, TableBytes: st.TableBytes,
		StuckAfterSecs: stuckAfter.Seconds(), StuckEffects: []stuckEffectJSON{}}
	for _, cs := range st.Consumers {
		out.Consumers = append(out.Consumers, consumerJSON{
			Consumer: cs.Consumer, Rows: cs.Rows, Oldest: cs.Oldest.UTC(), Newest: cs.Newest.UTC(),
			OldestAgeSecs: now.Sub(cs.Oldest).Seconds(),
		})
	}
	stuck, err := c.EffectList(ctx, inboxtype.EffectListParams{
		State: inboxtype.EffectStarted, StartedBefore: now.Add(-stuckAfter), Limit: stuckEffectsLimit + 1,
	})
	if err != nil {
		out.StuckEffectsError = command.OneLine(err.Error())
	}
	if len(stuck) > stuckEffectsLimit {
		stuck, out.StuckEffectsMore = stuck[:stuckEffectsLimit], true
	}
	for _, se := range stuck {
		out.StuckEffects = append(out.StuckEffects, stuckEffectJSON{
			Consumer: se.Consumer, MessageID: se.MessageID, Step: se.Step, Attempts: se.Attempts,
			StartedAt: se.StartedAt.UTC(), StartedAgeSecs: now.Sub(se.StartedAt).Seconds(),
		})
	}
	if partitioned {
		statsPartitions(ctx, c, &out)
	}
	if asJSON {
		return json.NewEncoder(e.Stdout).Encode(out)
	}
	tw := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CONSUMER\tROWS\tOLDEST\tNEWEST")
	for _, cs := range out.Consumers {
		fmt.Fprintf(tw, "%s\t%d\t%s ago\t%s ago\n", command.Text(cs.Consumer), cs.Rows,
			duration.Format(now.Sub(cs.Oldest).Round(time.Second)), duration.Format(now.Sub(cs.Newest).Round(time.Second)))
	}
	if len(out.Consumers) == 0 {
		fmt.Fprintln(tw, "(no rows)\t\t\t")
	}
	tw.Flush()
	fmt.Fprintf(e.Stdout, "table size: %s\n", formatBytes(st.TableBytes))
	printStatsPartitions(e.Stdout, &out)
	printStuckEffects(e.Stdout, &out, stuckAfter, now)
	return nil
}

// printStuckEffects lists the effect steps that started before the
// threshold and were never recorded done: a process died during or after
// the call, or the message is parked with an unknown outcome.
func printStuckEffects(w io.Writer, out *statsJSON, after time.Duration, now time.Time) {
	fmt.Fprintf(w, "\nremote effects started over %s ago and never done: ", duration.Format(after))
	switch {
	case out.StuckEffectsError != "":
		fmt.Fprintf(w, "unknown (%s)\n", command.Text(out.StuckEffectsError))
		return
	case len(out.StuckEffects) == 0:
		fmt.Fprintln(w, "none")
		return
	case out.StuckEffectsMore:
		fmt.Fprintf(w, "more than %d; the oldest:\n", len(out.StuckEffects))
	default:
		fmt.Fprintf(w, "%d\n", len(out.StuckEffects))
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CONSUMER\tMESSAGE ID\tSTEP\tATTEMPTS\tSTARTED")
	for _, se := range out.StuckEffects {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s ago\n", command.Text(se.Consumer), command.Text(se.MessageID), command.Text(se.Step), se.Attempts,
			duration.Format(now.Sub(se.StartedAt).Round(time.Second)))
	}
	tw.Flush()
	fmt.Fprintln(w, "A step declared non-idempotent parks its message (dead letter reason unknown_outcome):")
	fmt.Fprintln(w, "check with the provider, settle it with inbox.Admin.EffectResolve, then replay the dead letter.")
}

func formatBytes(n int64) string {
	switch {
	case n < 0:
		return "unknown"
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	case n < 1<<30:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	default:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	}
}
