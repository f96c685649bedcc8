package inboxsql

import (
	"context"

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
		err := d.db.QueryRowContext(ctx, query, key).Scan(&n)
		return n, err
	}
	query := d.q.deadLetterMarkOne
	if p.ID == 0 {
		query = d.q.deadLetterMarkAll
	}
	res, err := d.db.ExecContext(ctx, query, d.timeArg(p.Now), key)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// DeadLetterListMarked implements inboxdriver.ReplayStore.
func (d *Driver) DeadLetterListMarked(ctx context.Context, p *inboxtype.DeadLetterListParams) ([]*inboxtype.DeadLetter, error) {
	rows, err := d.db.QueryContext(ctx, d.q.deadLettersMarked, p.Consumer, p.Limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*inboxtype.DeadLetter
	for rows.Next() {
		dl, err := d.scanDeadLetter(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, dl)
	}
	return out, rows.Err()
}

// DeadLetterUnmarkReplay implements inboxdriver.ReplayStore.
func (d *Driver) DeadLetterUnmarkReplay(ctx context.Context, id int64) (bool, error) {
	res, err := d.db.ExecContext(ctx, d.q.deadLetterUnmark, id)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n > 0, err
}
