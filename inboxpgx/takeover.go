package inboxpgx

import (
	"context"

	"github.com/txinbox/inbox/inboxdriver"
)

// takeoverQuery records a takeover: the count goes up when the recorded
// position is the same and its message had started, stays when it had not,
// and starts again at 1 otherwise. existed tells whether a record was there
// before (xmax is non-zero on an update).
func (d *Driver) takeoverQuery() string {
	tk := d.tables.Qualify(inboxdriver.DialectPostgres, d.tables.Takeovers)
	return `INSERT INTO ` + tk + ` AS t (consumer_name, source, position, takeovers)
VALUES ($1, $2, $3, 1)
ON CONFLICT (consumer_name, source) DO UPDATE
   SET takeovers = CASE WHEN t.position <> EXCLUDED.position THEN 1
                        WHEN t.started THEN t.takeovers + 1
                        ELSE t.takeovers END,
       position = EXCLUDED.position,
       started = false,
       updated_at = now()
RETURNING takeovers, xmax <> 0`
}

// Takeover implements inboxdriver.Admin.
func (d *Driver) Takeover(ctx context.Context, p *inboxdriver.TakeoverParams) (int, bool, error) {
	var n int
	var existed bool
	err := d.pool.QueryRow(ctx, d.takeoverQuery(), p.Consumer, p.Source, p.Position).Scan(&n, &existed)
	return n, existed, err
}

// TakeoverStart implements inboxdriver.Admin.
func (d *Driver) TakeoverStart(ctx context.Context, p *inboxdriver.TakeoverParams) error {
	tk := d.tables.Qualify(inboxdriver.DialectPostgres, d.tables.Takeovers)
	_, err := d.pool.Exec(ctx, `INSERT INTO `+tk+` AS t (consumer_name, source, position, takeovers, started)
VALUES ($1, $2, $3, 1, true)
ON CONFLICT (consumer_name, source) DO UPDATE
   SET takeovers = CASE WHEN t.position = EXCLUDED.position THEN t.takeovers ELSE 1 END,
       position = EXCLUDED.position, started = true, updated_at = now()`, p.Consumer, p.Source, p.Position)
	return err
}

// TakeoverDone implements inboxdriver.Admin.
func (d *Driver) TakeoverDone(ctx context.Context, p *inboxdriver.TakeoverParams) error {
	tk := d.tables.Qualify(inboxdriver.DialectPostgres, d.tables.Takeovers)
	_, err := d.pool.Exec(ctx, `DELETE FROM `+tk+` WHERE consumer_name = $1 AND source = $2 AND position = $3`,
		p.Consumer, p.Source, p.Position)
	return err
}
