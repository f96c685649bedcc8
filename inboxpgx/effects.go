package inboxpgx

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxtype"
)

var _ inboxdriver.EffectStore = (*Driver)(nil)

// EffectBegin implements inboxdriver.EffectStore. A new step costs one
// autocommitted INSERT; a step seen before is locked, read and, if it may
// start again, updated in one short transaction.
func (d *Driver) EffectBegin(ctx context.Context, p *inboxdriver.EffectBeginParams) (*inboxtype.EffectEntry, bool, error) {
	ct, err := d.pool.Exec(ctx, d.q.effectInsert, p.Consumer, p.ID, p.Step, p.Now)
	if err != nil {
		return nil, false, err
	}
	if ct.RowsAffected() == 1 {
		return &inboxtype.EffectEntry{
			Consumer: p.Consumer, MessageID: p.ID, Step: p.Step,
			State: inboxtype.EffectStarted, Attempts: 1, StartedAt: p.Now,
		}, true, nil
	}
	var (
		e       *inboxtype.EffectEntry
		started bool
	)
	err = pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, d.q.effectLock, p.Consumer, p.ID, p.Step)
		if err != nil {
			return err
		}
		e, err = pgx.CollectExactlyOneRow(rows, scanEffect)
		if err != nil {
			return err
		}
		started = e.State == inboxtype.EffectFailed || (e.State == inboxtype.EffectStarted && p.RetryStarted)
		if !started {
			return nil
		}
		e.State, e.StartedAt, e.Result, e.DoneAt = inboxtype.EffectStarted, p.Now, nil, time.Time{}
		return tx.QueryRow(ctx, d.q.effectRestart, p.Consumer, p.ID, p.Step, p.Now).Scan(&e.Attempts)
	})
	if err != nil {
		return nil, false, err
	}
	return e, started, nil
}

// EffectDone implements inboxdriver.EffectStore.
func (d *Driver) EffectDone(ctx context.Context, p *inboxdriver.EffectDoneParams) (bool, error) {
	ct, err := d.pool.Exec(ctx, d.q.effectDone, p.Consumer, p.ID, p.Step, p.Result, p.Now)
	if err != nil {
		return false, err
	}
	return ct.RowsAffected() == 1, nil
}

// EffectFailed implements inboxdriver.EffectStore.
func (d *Driver) EffectFailed(ctx context.Context, p *inboxdriver.EffectKeyParams) (bool, error) {
	ct, err := d.pool.Exec(ctx, d.q.effectFailed, p.Consumer, p.ID, p.Step)
	if err != nil {
		return false, err
	}
	return ct.RowsAffected() == 1, nil
}

// EffectResolve implements inboxdriver.EffectStore.
func (d *Driver) EffectResolve(ctx context.Context, p *inboxdriver.EffectResolveParams) (bool, error) {
	ct, err := d.pool.Exec(ctx, d.q.effectResolve, p.Consumer, p.ID, p.Step, string(p.State), p.Result, p.Now)
	if err != nil {
		return false, err
	}
	return ct.RowsAffected() == 1, nil
}

// EffectList implements inboxdriver.EffectStore.
func (d *Driver) EffectList(ctx context.Context, p *inboxtype.EffectListParams) ([]*inboxtype.EffectEntry, error) {
	var id, before any
	if p.MessageID != "" {
		id = p.MessageID
	}
	if !p.StartedBefore.IsZero() {
		before = p.StartedBefore
	}
	rows, err := d.pool.Query(ctx, d.q.effectList, p.Consumer, id, string(p.State), before, p.Limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanEffect)
}

func scanEffect(row pgx.CollectableRow) (*inboxtype.EffectEntry, error) {
	var (
		e      inboxtype.EffectEntry
		state  string
		doneAt *time.Time
	)
	if err := row.Scan(&e.Consumer, &e.MessageID, &e.Step, &state, &e.Result, &e.Attempts, &e.StartedAt, &doneAt); err != nil {
		return nil, err
	}
	e.State = inboxtype.EffectState(state)
	if doneAt != nil {
		e.DoneAt = *doneAt
	}
	return &e, nil
}
