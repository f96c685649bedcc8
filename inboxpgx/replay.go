package inboxpgx

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxtype"
)

var _ inboxdriver.ReplayStore = (*Driver)(nil)

// DeadLetterMarkReplay implements inboxdriver.ReplayStore.
func (d *Driver) DeadLetterMarkReplay(ctx context.Context, p *inboxdriver.DeadLetterMarkParams) (int64, error) {
	key := any(p.ID)
	if p.ID == 0 {
		key = p.Consumer
	}
	if p.DryRun {
		query := d.q.deadLetterCountOne
		if p.ID == 0 {
			query = d.q.deadLetterCountAll
		}
		var n int64
		err := d.pool.QueryRow(ctx, query, key).Scan(&n)
		return n, err
	}
	query := d.q.deadLetterMarkOne
	if p.ID == 0 {
		query = d.q.deadLetterMarkAll
	}
	ct, err := d.pool.Exec(ctx, query, p.Now, key)
	if err != nil {
		return 0, err
	}
	return ct.RowsAffected(), nil
}

// DeadLetterListMarked implements inboxdriver.ReplayStore.
func (d *Driver) DeadLetterListMarked(ctx context.Context, p *inboxtype.DeadLetterListParams) ([]*inboxtype.DeadLetter, error) {
	rows, err := d.pool.Query(ctx, d.q.deadLettersMarked, p.Consumer, p.Limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanDeadLetter)
}

// DeadLetterUnmarkReplay implements inboxdriver.ReplayStore.
func (d *Driver) DeadLetterUnmarkReplay(ctx context.Context, id int64) (bool, error) {
	ct, err := d.pool.Exec(ctx, d.q.deadLetterUnmark, id)
	if err != nil {
		return false, err
	}
	return ct.RowsAffected() > 0, nil
}
