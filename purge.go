package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/internal/duration"
)

// PurgeParams say which inbox rows Purge deletes.
type PurgeParams struct {
	// OlderThan deletes the rows processed longer ago than this. It must not
	// be shorter than Config.ReplayHorizon.
	OlderThan time.Duration
	// Consumer limits the purge to one consumer. Empty purges all.
	Consumer string
	// BatchSize bounds each DELETE. Defaults to Config.PurgeBatchSize.
	BatchSize int
	// DryRun counts the rows that would be deleted and deletes none.
	DryRun bool
	// Progress, if set, is called after each batch with the number of rows
	// deleted so far.
	Progress func(deleted int64)
}

// CheckPurgeWindow returns an error wrapping ErrWindowTooShort when a
// purge of the rows older than olderThan would delete rows inside the
// replay horizon, where a replayed message would look new. Admin.Purge
// checks it; a tool checks it with it before it reaches a store.
func CheckPurgeWindow(olderThan, horizon time.Duration) error {
	if olderThan < horizon {
		return wrapf(ErrWindowTooShort, "purge of rows older than %s refused: the replay horizon is %s, and a replay inside it would look new",
			duration.Format(olderThan), duration.Format(horizon))
	}
	return nil
}

// Purge deletes inbox rows older than p.OlderThan, with the effect-ledger
// rows of the same messages, in batches of at most p.BatchSize, until a batch
// comes back short. Each batch is its own short transaction that skips rows
// locked by in-flight claims, so consumers keep claiming while it runs; after
// each batch it rests as Config.PurgeRest says, so that they keep their
// share of the database too.
//
// Purge refuses, with ErrWindowTooShort, a window shorter than
// Config.ReplayHorizon: inside the horizon a replayed message would look new
// and be applied twice. It returns the number of rows deleted, or with
// p.DryRun the number it would delete.
func (a *Admin) Purge(ctx context.Context, p PurgeParams) (int64, error) {
	if err := CheckPurgeWindow(p.OlderThan, a.config.ReplayHorizon); err != nil {
		return 0, err
	}
	if p.Consumer != "" {
		if err := ValidateConsumer(p.Consumer); err != nil {
			return 0, err
		}
	}
	if p.BatchSize < 0 {
		return 0, fmt.Errorf("inbox: purge: BatchSize must be positive, got %d", p.BatchSize)
	}
	if p.BatchSize == 0 {
		p.BatchSize = a.config.PurgeBatchSize
	}
	params := &inboxdriver.PurgeParams{
		// The cutoff is the database's now() minus OlderThan: rows are
		// stamped with the database's clock too, never a host's.
		OlderThan: p.OlderThan,
		Consumer:  p.Consumer,
		Limit:     p.BatchSize,
	}
	if p.DryRun {
		n, err := a.driver.PurgeCount(ctx, params)
		if err != nil {
			return 0, fmt.Errorf("inbox: purge dry run: %w", a.classify(err))
		}
		return n, nil
	}
	var total int64
	for {
		start := time.Now()
		n, err := a.driver.PurgeBatch(ctx, params)
		total += n
		if err != nil {
			return total, fmt.Errorf("inbox: purge after %d rows: %w", total, a.classify(err))
		}
		if p.Progress != nil {
			p.Progress(total)
		}
		if n < int64(p.BatchSize) {
			return total, nil
		}
		if err := a.rest(ctx, time.Since(start)); err != nil {
			return total, wrapf(err, "purge after %d rows", total)
		}
	}
}

// rest waits Config.PurgeRest times worked, or until ctx is done.
func (a *Admin) rest(ctx context.Context, worked time.Duration) error {
	d := time.Duration(float64(worked) * a.config.PurgeRest)
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// RunCleaner purges rows older than Config.Retention every
// Config.CleanerInterval, starting at once, until ctx is done. It is opt-in:
// run it in a goroutine of every process if you like, since a store-wide lock
// lets only one of them purge at a time and the others skip their turn.
//
// When the store refuses the purge for want of a privilege (its role may
// not DELETE from the inbox: see docs/GRANTS.md), RunCleaner returns an
// error wrapping ErrPermissionDenied at once, on its first run: a cleaner
// that cannot clean must not look like one that runs while the inbox grows.
// Other errors, such as an unreachable store, are logged and the cleaner
// keeps going. It returns nil when ctx is done.
func (a *Admin) RunCleaner(ctx context.Context) error {
	if a.config.Retention < a.config.ReplayHorizon {
		return fmt.Errorf("inbox: cleaner: Config.Retention %s is shorter than Config.ReplayHorizon %s: %w",
			duration.Format(a.config.Retention), duration.Format(a.config.ReplayHorizon), ErrWindowTooShort)
	}
	if err := a.config.validatePartitions(a.driver); err != nil {
		return wrapf(err, "cleaner")
	}
	lockKey := "inbox-cleaner:" + a.driver.Tables().Schema + "." + a.driver.Tables().Inbox
	ticker := time.NewTicker(a.config.CleanerInterval)
	defer ticker.Stop()
	for {
		ran, err := a.driver.WithLock(ctx, lockKey, func(ctx context.Context) error {
			if a.partitioned() {
				return a.cleanPartitions(ctx)
			}
			n, err := a.Purge(ctx, PurgeParams{OlderThan: a.config.Retention})
			if n > 0 || err != nil {
				a.logger.InfoContext(ctx, "inbox: cleaner purged", "rows", n, "err", err)
			}
			return err
		})
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, ErrPermissionDenied):
			a.logger.ErrorContext(ctx, "inbox: cleaner stopped: the store refused the purge for want of a privilege", "err", err)
			return wrapf(err, "cleaner")
		case err != nil:
			a.logger.ErrorContext(ctx, "inbox: cleaner failed", "err", err)
		case !ran:
			a.logger.DebugContext(ctx, "inbox: cleaner skipped: another process holds the lock")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}
