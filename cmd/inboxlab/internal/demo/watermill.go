package demo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	"github.com/txinbox/inbox/cmd/inboxlab/internal/broker"
)

// StrategyWatermillDeduplicator is the consumer written with Watermill's
// Deduplicator middleware, keyed on the event id: its best case, the right
// key, where its default key is a hash of the body.
const StrategyWatermillDeduplicator = "watermill-deduplicator"

// errHandlerFailed is the handler's failure at the first window: its
// commit fails (the connection dropped) after the effect, which rolls back.
var errHandlerFailed = errors.New("commit failed: connection reset")

// watermillDedup runs one consumer of the watermill-deduplicator strategy:
// a Watermill handler behind the Deduplicator, delivered to as a Router
// delivers (handleMessage: an error nacks, and the subscriber sends the
// message again; no error acks), with acknowledgements committed per batch
// as the other consumers do. The Deduplicator keeps its keys in memory, as
// it does by default, and records a key before the handler runs.
//
// Its windows: at the first the process lives on and the handler fails
// (its commit fails), so the Router nacks and the redelivery meets a key
// already recorded: acked, never applied. At the other two the process
// dies: the next life has a new Deduplicator, which has forgotten the keys
// of the batch it must do again.
type watermillDedup struct {
	*naive
	// failures counts the handler's failures at the first window, which
	// the run counts among the crashes: one per window.
	failures int
}

func runWatermillDedup(ctx context.Context, cfg *Config, st *store, t broker.Topic, s *scenario, consumer string) (int, error) {
	w := &watermillDedup{naive: &naive{cfg: cfg, st: st, t: t, s: s, strategy: StrategyWatermillDeduplicator, consumer: consumer}}
	crashes := 0
	for range 10 {
		err := w.life(ctx)
		switch {
		case err == nil:
			return crashes + w.failures, nil
		case errors.Is(err, errCrash):
			crashes++
		default:
			return crashes, err
		}
	}
	return crashes, errors.New("did not finish in 10 lives")
}

// life is one process: a new Deduplicator, reading from the last batch
// acknowledged.
func (w *watermillDedup) life(ctx context.Context) error {
	keys, err := middleware.NewMapExpiringKeyRepository(time.Minute)
	if err != nil {
		return err
	}
	dedup := &middleware.Deduplicator{
		KeyFactory: func(msg *message.Message) (string, error) { return msg.Metadata.Get("event-id"), nil },
		Repository: keys,
		Timeout:    time.Second,
	}
	var current *record
	handler := dedup.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		return nil, w.handle(msg.Context(), current)
	})
	sub, err := w.t.Subscribe(ctx, subscription(w.strategy, w.consumer), poll)
	if err != nil {
		return err
	}
	defer sub.Close()
	return drain(ctx, sub, len(w.s.records), func(batch []*record) error {
		for _, rec := range batch {
			current = rec
			if err := deliver(ctx, handler, rec); err != nil {
				return err
			}
		}
		return ack(ctx, sub, batch)
	})
}

// deliver hands rec to handler as the Router does, until it is acked: a
// handler error nacks it, and the subscriber sends it again. A crash ends
// the life instead.
func deliver(ctx context.Context, handler message.HandlerFunc, rec *record) error {
	for range 5 {
		msg := message.NewMessage(rec.ID, rec.Body)
		msg.Metadata.Set("event-id", rec.ID)
		msg.SetContext(ctx)
		_, err := handler(msg)
		switch {
		case err == nil:
			return nil // acked
		case errors.Is(err, errCrash):
			return err
		}
		// nacked: delivered again
	}
	return fmt.Errorf("record %d nacked 5 times", rec.index)
}

// handle is the Watermill handler: the effect in a transaction, and the
// windows.
func (w *watermillDedup) handle(ctx context.Context, rec *record) error {
	e, err := rec.decode()
	if err != nil {
		return err
	}
	tx, err := w.st.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := apply(ctx, w.st.dialect, tx, w.strategy, w.consumer, e); err != nil {
		return err
	}
	if w.crashAt(afterEffect, rec) {
		w.failures++
		return errHandlerFailed // the deferred rollback undoes the effect; the Router nacks
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	if w.crashAt(afterCommit, rec) || w.crashAt(midBatch, rec) {
		return errCrash // the batch is not acknowledged
	}
	return nil
}
