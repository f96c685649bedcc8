package inboxsql

import (
	"context"
	"database/sql"
	"errors"

	"github.com/txinbox/inbox/inboxdriver"
)

func (d *Driver) takeoverTable() string {
	return d.tables.Qualify(d.dialect.schema(), d.tables.Takeovers)
}

// Takeover implements inboxdriver.Admin. It reads the record and writes
// it in one short transaction; only the owner of a source writes its
// record, so the read needs no lock beyond the transaction's.
func (d *Driver) Takeover(ctx context.Context, p *inboxdriver.TakeoverParams) (n int, existed bool, err error) {
	tk := d.takeoverTable()
	q := &queries{d: d.dialect}
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, false, err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	var pos int64
	var count int
	lock := ""
	if d.dialect != SQLite {
		lock = " FOR UPDATE"
	}
	err = tx.QueryRowContext(ctx, `SELECT position, takeovers FROM `+tk+` WHERE consumer_name = `+q.ph(1)+` AND source = `+q.ph(2)+lock,
		p.Consumer, p.Source).Scan(&pos, &count)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		n = 1
		_, err = tx.ExecContext(ctx, `INSERT INTO `+tk+` (consumer_name, source, position, takeovers) VALUES (`+q.phs(1, 4)+`)`,
			p.Consumer, p.Source, p.Position, n)
	case err != nil:
		return 0, false, err
	default:
		existed = true
		n = 1
		if pos == p.Position {
			n = count + 1
		}
		_, err = tx.ExecContext(ctx, `UPDATE `+tk+` SET position = `+q.ph(1)+`, takeovers = `+q.ph(2)+
			` WHERE consumer_name = `+q.ph(3)+` AND source = `+q.ph(4), p.Position, n, p.Consumer, p.Source)
	}
	if err != nil {
		return 0, false, err
	}
	if err = tx.Commit(); err != nil {
		return 0, false, err
	}
	return n, existed, nil
}

// TakeoverMove implements inboxdriver.Admin.
func (d *Driver) TakeoverMove(ctx context.Context, p *inboxdriver.TakeoverParams) error {
	tk := d.takeoverTable()
	q := &queries{d: d.dialect}
	res, err := d.db.ExecContext(ctx, `UPDATE `+tk+` SET position = `+q.ph(1)+`, takeovers = 1 WHERE consumer_name = `+q.ph(2)+` AND source = `+q.ph(3),
		p.Position, p.Consumer, p.Source)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n > 0 {
		return err
	}
	_, err = d.db.ExecContext(ctx, `INSERT INTO `+tk+` (consumer_name, source, position, takeovers) VALUES (`+q.phs(1, 4)+`)`,
		p.Consumer, p.Source, p.Position, 1)
	return err
}

// TakeoverDone implements inboxdriver.Admin.
func (d *Driver) TakeoverDone(ctx context.Context, p *inboxdriver.TakeoverParams) error {
	q := &queries{d: d.dialect}
	_, err := d.db.ExecContext(ctx, `DELETE FROM `+d.takeoverTable()+` WHERE consumer_name = `+q.ph(1)+` AND source = `+q.ph(2)+` AND position = `+q.ph(3),
		p.Consumer, p.Source, p.Position)
	return err
}
