package demo

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"
	"time"

	"github.com/txinbox/inbox/cmd/inboxlab/internal/broker"
)

// naive runs one consumer of one of the strategies that fail,
// written by hand the way such consumers usually are: poll, process a batch
// of records one transaction each, acknowledge the batch (commit its
// offsets, or ack each record).
type naive struct {
	cfg      *Config
	st       *store
	t        broker.Topic
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

func runNaive(ctx context.Context, cfg *Config, st *store, t broker.Topic, s *scenario, strategy, consumer string) (int, error) {
	n := &naive{cfg: cfg, st: st, t: t, s: s, strategy: strategy, consumer: consumer, set: map[string]bool{}}
	crashes := 0
	for range 10 {
		err := n.life(ctx)
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

// life runs one consumer until it has acknowledged the last record or
// crashes. A crash ends the subscription without acknowledging: the next
// life gets what was not acknowledged again.
func (n *naive) life(ctx context.Context) error {
	sub, err := n.t.Subscribe(ctx, subscription(n.strategy, n.consumer), poll)
	if err != nil {
		return err
	}
	defer sub.Close()
	return drain(ctx, sub, len(n.s.records), func(batch []*record) error { return n.batch(ctx, sub, batch) })
}

// drain polls sub and hands each batch to fn until fn has taken the record
// at index end-1, the stream's last. A batch is the next batchSize records,
// or the rest at the end of the stream: the same batches on every run.
func drain(ctx context.Context, sub broker.Poller, end int, fn func(batch []*record) error) error {
	var buf []*record
	deadline := time.Now().Add(60 * time.Second)
	for {
		if time.Now().After(deadline) {
			return errors.New("no progress for 60s")
		}
		ds, err := sub.Poll(ctx)
		if err != nil {
			return err
		}
		if buf, err = merge(buf, ds); err != nil {
			return err
		}
		for len(buf) >= batchSize || (len(buf) > 0 && buf[len(buf)-1].index == end-1) {
			batch := buf[:min(batchSize, len(buf))]
			if err := fn(batch); err != nil {
				return err
			}
			buf = buf[len(batch):]
			if batch[len(batch)-1].index == end-1 {
				return nil
			}
		}
	}
}

// merge adds ds to buf in produce order. A record delivered again while
// it waits in buf replaces its earlier delivery. Kafka delivers in order;
// a broker that redelivers after a timeout may not.
func merge(buf []*record, ds []*broker.Delivery) ([]*record, error) {
	for _, d := range ds {
		r, err := newRecord(d)
		if err != nil {
			return nil, err
		}
		i, found := slices.BinarySearchFunc(buf, r.index, func(x *record, index int) int { return cmp.Compare(x.index, index) })
		if found {
			buf[i] = r
			continue
		}
		buf = slices.Insert(buf, i, r)
	}
	return buf, nil
}

func (n *naive) batch(ctx context.Context, sub broker.Poller, batch []*record) error {
	if n.strategy == "ack-before-commit" {
		// The bug: the acknowledgement goes first, as an auto-commit on
		// poll, or an auto-ack, does.
		if err := ack(ctx, sub, batch); err != nil {
			return err
		}
	}
	for _, rec := range batch {
		if err := n.record(ctx, rec); err != nil {
			return err
		}
	}
	if n.strategy != "ack-before-commit" {
		return ack(ctx, sub, batch)
	}
	return nil
}

// ack acknowledges batch: commits its offsets, or acks each record, and
// waits until the broker has it.
func ack(ctx context.Context, sub broker.Poller, batch []*record) error {
	ds := make([]*broker.Delivery, len(batch))
	for i, r := range batch {
		ds[i] = r.Delivery
	}
	return broker.Ack(ctx, sub, ds)
}

// crashAt reports whether window w crashes at rec, the first time only.
func (n *naive) crashAt(w window, rec *record) bool {
	if n.fired[w] || n.s.crashAt[w] != rec.index {
		return false
	}
	n.fired[w] = true
	return true
}

// record processes one record in its own transaction.
func (n *naive) record(ctx context.Context, rec *record) error {
	e, err := rec.decode()
	if err != nil {
		return err
	}
	var key string
	switch n.strategy {
	case "offset-key":
		key = rec.Key()
	case "payload-hash":
		sum := sha256.Sum256(rec.Body)
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
		return errCrash // the batch is not acknowledged
	}
	return nil
}

// skip records that the strategy decided e was a duplicate.
func (n *naive) skip(ctx context.Context, e event) error {
	_, err := n.st.db.ExecContext(ctx, n.st.q(`INSERT INTO skipped (strategy, consumer, event_id) VALUES (?, ?, ?)`), n.strategy, n.consumer, e.ID)
	return err
}
