package demo

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// naive runs one consumer of one of the strategies that fail,
// written by hand the way such consumers usually are: poll, process a batch
// of records one transaction each, commit the batch's offsets.
type naive struct {
	cfg      *Config
	st       *store
	k        *kafka
	s        *scenario
	strategy string
	consumer string
	// fired records the crash windows already taken: each fires once.
	fired [numWindows]bool
	// set is the separate store of separate-store: it outlives the
	// consumer's crashes, as Redis would.
	set map[string]bool
}

// errCrash ends a life of the consumer at a crash window.
var errCrash = errors.New("crash")

func runNaive(ctx context.Context, cfg *Config, st *store, k *kafka, s *scenario, strategy, consumer string) (int, error) {
	n := &naive{cfg: cfg, st: st, k: k, s: s, strategy: strategy, consumer: consumer, set: map[string]bool{}}
	group := fmt.Sprintf("demo-%s-%s", strategy, consumer)
	crashes := 0
	for range 10 {
		err := n.life(ctx, group)
		switch {
		case err == nil:
			return crashes, nil
		case errors.Is(err, errCrash):
			crashes++
		default:
			return crashes, err
		}
	}
	return crashes, errors.New("did not finish in 10 lives")
}

// life runs one member of the group until it has committed the last record
// or crashes. A crash closes the client without committing: the next
// member starts from the last committed offset.
func (n *naive) life(ctx context.Context, group string) error {
	cl, err := kgo.NewClient(append(n.k.groupOpts(group), kgo.DisableAutoCommit())...)
	if err != nil {
		return err
	}
	defer cl.Close()
	end := int64(len(n.s.records))
	var buf []*kgo.Record
	deadline := time.Now().Add(60 * time.Second)
	for {
		if time.Now().After(deadline) {
			return errors.New("no progress for 60s")
		}
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		fs := cl.PollFetches(pctx)
		cancel()
		if err := ctx.Err(); err != nil {
			return err
		}
		fs.EachError(func(_ string, _ int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				fmt.Fprintf(n.cfg.Log, "demo: %s/%s: fetch: %v\n", n.strategy, n.consumer, err)
			}
		})
		buf = append(buf, fs.Records()...)
		// A batch is the next batchSize records, or the rest at the end of
		// the topic: the same batches on every run.
		for len(buf) >= batchSize || (len(buf) > 0 && buf[len(buf)-1].Offset == end-1) {
			batch := buf[:min(batchSize, len(buf))]
			if err := n.batch(ctx, cl, batch); err != nil {
				return err
			}
			buf = buf[len(batch):]
			if batch[len(batch)-1].Offset == end-1 {
				return nil
			}
		}
	}
}

func (n *naive) batch(ctx context.Context, cl *kgo.Client, batch []*kgo.Record) error {
	if n.strategy == "ack-before-commit" {
		// The bug: the offsets go first, as an auto-commit on poll does.
		if err := cl.CommitRecords(ctx, batch...); err != nil {
			return err
		}
	}
	for _, rec := range batch {
		if err := n.record(ctx, rec); err != nil {
			return err
		}
	}
	if n.strategy != "ack-before-commit" {
		return cl.CommitRecords(ctx, batch...)
	}
	return nil
}

// crashAt reports whether window w crashes at rec, the first time only.
func (n *naive) crashAt(w window, rec *kgo.Record) bool {
	if n.fired[w] || int64(n.s.crashAt[w]) != rec.Offset {
		return false
	}
	n.fired[w] = true
	return true
}

func decode(rec *kgo.Record) (event, error) {
	var e event
	for _, h := range rec.Headers {
		if h.Key == "event-id" {
			e.ID = string(h.Value)
		}
	}
	var b struct {
		Account string `json:"account"`
		Cents   int64  `json:"amount_cents"`
		SKU     string `json:"sku"`
		Qty     int64  `json:"qty"`
	}
	if err := json.Unmarshal(rec.Value, &b); err != nil {
		return e, err
	}
	e.Account, e.Cents, e.SKU, e.Qty = b.Account, b.Cents, b.SKU, b.Qty
	return e, nil
}

// record processes one record in its own transaction.
func (n *naive) record(ctx context.Context, rec *kgo.Record) error {
	e, err := decode(rec)
	if err != nil {
		return err
	}
	var key string
	switch n.strategy {
	case "offset-key":
		key = fmt.Sprintf("%s/%d/%d", rec.Topic, rec.Partition, rec.Offset)
	case "payload-hash":
		sum := sha256.Sum256(rec.Value)
		key = hex.EncodeToString(sum[:])
	case "ack-before-commit":
		key = e.ID
	case "separate-store":
		if n.set[e.ID] {
			return n.skip(ctx, e)
		}
	}
	tx, err := n.st.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if key != "" {
		res, err := tx.ExecContext(ctx, n.st.q(`INSERT INTO dedup (strategy, consumer, dedup_key) VALUES (?, ?, ?) ON CONFLICT DO NOTHING`), n.strategy, n.consumer, key)
		if err != nil {
			return err
		}
		if claimed, err := res.RowsAffected(); err != nil {
			return err
		} else if claimed == 0 {
			_ = tx.Rollback()
			return n.skip(ctx, e)
		}
	}
	if err := apply(ctx, n.st.dialect, tx, n.strategy, n.consumer, e); err != nil {
		return err
	}
	if n.crashAt(afterEffect, rec) {
		return errCrash // the deferred rollback undoes the effect
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	if n.crashAt(afterCommit, rec) {
		return errCrash // for separate-store, before the set is written
	}
	if n.strategy == "separate-store" {
		n.set[e.ID] = true
	}
	if n.crashAt(midBatch, rec) {
		return errCrash // the batch's offsets are not committed
	}
	return nil
}

// skip records that the strategy decided e was a duplicate.
func (n *naive) skip(ctx context.Context, e event) error {
	_, err := n.st.db.ExecContext(ctx, n.st.q(`INSERT INTO skipped (strategy, consumer, event_id) VALUES (?, ?, ?)`), n.strategy, n.consumer, e.ID)
	return err
}
