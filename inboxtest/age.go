package inboxtest

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/txinbox/inbox/inboxdriver"
)

// AgeRows moves the processed_at of consumer's inbox rows back by d, as if
// they had been processed d earlier; ids limits it to those messages' rows,
// and nil ages every row of consumer. Stores stamp processed_at with the
// database's clock, which no client setting moves, so tests that need old
// rows (for a purge, for stats) age them with AgeRows. It runs through the
// store's MigrationTx.
func AgeRows(ctx context.Context, store inboxdriver.Admin, consumer string, ids []string, d time.Duration) error {
	t := store.Tables()
	dialect := store.Dialect()
	inbox := t.Qualify(dialect, t.Inbox)
	var b strings.Builder
	args := []any{d.Microseconds(), consumer}
	ph := func(n int) string {
		if dialect == inboxdriver.DialectPostgres {
			return fmt.Sprintf("$%d", n)
		}
		return "?"
	}
	b.WriteString(`UPDATE ` + inbox + ` SET processed_at = `)
	switch dialect {
	case inboxdriver.DialectPostgres:
		b.WriteString(`processed_at - $1::bigint * interval '1 microsecond'`)
	case inboxdriver.DialectMySQL:
		b.WriteString(`processed_at - INTERVAL ? MICROSECOND`)
	default: // SQLite: Unix microseconds
		b.WriteString(`processed_at - ?`)
	}
	b.WriteString(` WHERE consumer_name = ` + ph(2))
	if ids != nil {
		if len(ids) == 0 {
			return nil
		}
		b.WriteString(` AND message_id`)
		if dialect == inboxdriver.DialectPostgres {
			b.WriteString(`::text`)
		}
		b.WriteString(` IN (`)
		for i, id := range ids {
			if i > 0 {
				b.WriteString(", ")
			}
			args = append(args, id)
			b.WriteString(ph(len(args)))
		}
		b.WriteString(`)`)
	}
	return store.MigrationTx(ctx, func(ctx context.Context, q inboxdriver.Querier) error {
		return q.Exec(ctx, b.String(), args...)
	})
}
