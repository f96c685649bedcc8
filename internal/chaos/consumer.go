package chaos

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/internal/fault"
)

// consumerFlags are the arguments of one consumer process.
type consumerFlags struct {
	slot        int
	consumer    string
	databaseURL string
	schema      string
	transport   string
	brokers     string
	topic       string
	group       string
	queueURL    string
	endpoint    string
}

// payload is the body of every chaos event.
type payload struct {
	EventID string `json:"event_id"`
	Account int    `json:"account"`
	Amount  int64  `json:"amount"`
}

// outcomeWriter prints one line per processed message for the coordinator:
// "applied ID" or "duplicate ID". Each line is one write, so a kill never
// leaves half a line.
type outcomeWriter struct{ w io.Writer }

func (o outcomeWriter) report(outcome inbox.Outcome, id string) {
	if outcome == inbox.Applied || outcome == inbox.Duplicate {
		fmt.Fprintf(o.w, "%s %s\n", outcome, id)
	}
}

// RunConsumer is the main of one consumer process, the hidden
// 'inbox chaos-consumer' command. It runs until ctx is done.
func RunConsumer(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f consumerFlags
	fs := flag.NewFlagSet("chaos-consumer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&f.slot, "slot", 0, "")
	fs.StringVar(&f.consumer, "consumer", DefaultConsumerName, "")
	fs.StringVar(&f.databaseURL, "database-url", "", "")
	fs.StringVar(&f.schema, "schema", "", "")
	fs.StringVar(&f.transport, "transport", "", "")
	fs.StringVar(&f.brokers, "brokers", "", "")
	fs.StringVar(&f.topic, "topic", "", "")
	fs.StringVar(&f.group, "group", "", "")
	fs.StringVar(&f.queueURL, "queue-url", "", "")
	fs.StringVar(&f.endpoint, "endpoint", "", "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := fault.ArmFromEnv(); err != nil {
		return err
	}
	cfg, err := pgxpool.ParseConfig(f.databaseURL)
	if err != nil {
		return err
	}
	cfg.MaxConns = 4
	cfg.ConnConfig.RuntimeParams["application_name"] = "inbox-chaos-" + f.schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	d, err := inboxpgx.New(pool, &inboxpgx.Config{Tables: inboxdriver.Tables{Schema: f.schema}})
	if err != nil {
		return err
	}
	client, err := inbox.NewClient(d, nil)
	if err != nil {
		return err
	}
	accounts := pgx.Identifier{f.schema, "accounts"}.Sanitize()
	effects := pgx.Identifier{f.schema, "effects"}.Sanitize()
	credit := inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, m inbox.Message) error {
		var p payload
		if err := json.Unmarshal(m.Payload, &p); err != nil {
			return inbox.Permanent(fmt.Errorf("payload: %w", err))
		}
		if _, err := tx.Exec(ctx, `UPDATE `+accounts+` SET balance = balance + $1 WHERE id = $2`, p.Amount, p.Account); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO `+effects+` (consumer, event_id, account, amount, slot) VALUES ($1, $2, $3, $4, $5)`,
			f.consumer, m.ID, p.Account, p.Amount, f.slot)
		return err
	})
	out := outcomeWriter{w: stdout}
	return runTransportConsumer(ctx, &f, client, credit, out)
}

// runTransportConsumer runs the transport's adapter until ctx is done.
func runTransportConsumer(ctx context.Context, f *consumerFlags, client *inbox.Client[pgx.Tx], h inbox.Handler[pgx.Tx], out outcomeWriter) error {
	switch f.transport {
	default:
		return fmt.Errorf("chaos-consumer: transport %q is not available", f.transport)
	}
}
