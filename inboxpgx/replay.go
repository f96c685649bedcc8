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
	query, key := d.q.deadLetterMarkOne, any(p.ID)
	if p.ID == 0 {
		query, key = d.q.deadLetterMarkAll, p.Consumer
	}
	ct, err := d.pool.Exec(ctx, query, p.Now, key)
	if err != nil {
		return 0, err
	}
	return ct.RowsAffected(), nil
}

// DeadLettersMarked implements inboxdriver.ReplayStore.
func (d *Driver) DeadLettersMarked(ctx context.Context, p *inboxdriver.DeadLetterListParams) ([]*inboxtype.DeadLetter, error) {
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
