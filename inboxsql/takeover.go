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
	var started bool
	lock := ""
	if d.dialect != SQLite {
		lock = " FOR UPDATE"
	}
	err = tx.QueryRowContext(ctx, `SELECT position, takeovers, started FROM `+tk+` WHERE consumer_name = `+q.ph(1)+` AND source = `+q.ph(2)+lock,
		p.Consumer, p.Source).Scan(&pos, &count, &started)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		n = 1
		_, err = tx.ExecContext(ctx, `INSERT INTO `+tk+` (consumer_name, source, position, takeovers) VALUES (`+q.phs(1, 4)+`)`,
			p.Consumer, p.Source, p.Position, n)
	case err != nil:
		return 0, false, err
	default:
		existed = true
		switch {
		case pos != p.Position:
			n = 1
		case started:
			n = count + 1
		default:
			n = count
		}
		_, err = tx.ExecContext(ctx, `UPDATE `+tk+` SET position = `+q.ph(1)+`, takeovers = `+q.ph(2)+`, started = `+q.ph(3)+
			` WHERE consumer_name = `+q.ph(4)+` AND source = `+q.ph(5), p.Position, n, false, p.Consumer, p.Source)
	}
	if err != nil {
		return 0, false, err
	}
	if err = tx.Commit(); err != nil {
		return 0, false, err
	}
	return n, existed, nil
}

// TakeoverStart implements inboxdriver.Admin. Only the owner of a source
// writes its record, so the update and the insert need no lock between
// them.
func (d *Driver) TakeoverStart(ctx context.Context, p *inboxdriver.TakeoverParams) error {
	tk := d.takeoverTable()
	q := &queries{d: d.dialect}
	if _, err := d.db.ExecContext(ctx, `UPDATE `+tk+` SET takeovers = CASE WHEN position = `+q.ph(1)+` THEN takeovers ELSE 1 END, position = `+q.ph(2)+
		`, started = `+q.ph(3)+` WHERE consumer_name = `+q.ph(4)+` AND source = `+q.ph(5),
		p.Position, p.Position, true, p.Consumer, p.Source); err != nil {
		return err
	}
	var n int
	if err := d.db.QueryRowContext(ctx, `SELECT count(*) FROM `+tk+` WHERE consumer_name = `+q.ph(1)+` AND source = `+q.ph(2), p.Consumer, p.Source).Scan(&n); err != nil || n > 0 {
		return err
	}
	_, err := d.db.ExecContext(ctx, `INSERT INTO `+tk+` (consumer_name, source, position, takeovers, started) VALUES (`+q.phs(1, 5)+`)`,
		p.Consumer, p.Source, p.Position, 1, true)
	return err
}

// TakeoverDone implements inboxdriver.Admin.
func (d *Driver) TakeoverDone(ctx context.Context, p *inboxdriver.TakeoverParams) error {
	q := &queries{d: d.dialect}
	_, err := d.db.ExecContext(ctx, `DELETE FROM `+d.takeoverTable()+` WHERE consumer_name = `+q.ph(1)+` AND source = `+q.ph(2)+` AND position = `+q.ph(3),
		p.Consumer, p.Source, p.Position)
	return err
}
