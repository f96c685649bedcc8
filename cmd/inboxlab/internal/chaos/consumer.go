package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/cmd/inboxlab/internal/broker"
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
	// where is the broker.
	where broker.Address
	// control disables the inbox's skip, for the negative control that
	// shows the checker catches double applications.
	control bool
	// pipelined queues the handler's statements (Config.Pipelined).
	pipelined bool
}

// payload is the body of every chaos event.
type payload struct {
	EventID string `json:"event_id"`
	Account int    `json:"account"`
	Amount  int64  `json:"amount"`
	Crash   string `json:"crash,omitempty"`
}

// body is e's payload, as the producer sends it.
func (e event) body() []byte {
	b, _ := json.Marshal(payload{EventID: e.ID, Account: e.Account, Amount: e.Amount, Crash: e.Crash})
	return b
}

// crashPoisonLine starts what a consumer prints to stderr as a crash-poison
// event takes it down, so that the coordinator does not count the exit as a
// problem.
const crashPoisonLine = "crash poison: "

// crash takes the process down the way how says, at once, without
// returning: os.Exit from the handler, as a dependency might, or a panic
// on a goroutine the handler started, which no recover in the handler's
// caller can catch.
func crash(how, id string) {
	fmt.Fprintf(os.Stderr, "%s%s, event %s\n", crashPoisonLine, how, id)
	if how == crashInGoroutine {
		go func() { panic(crashPoisonLine + "a goroutine of the handler panicked on event " + id) }()
		select {}
	}
	os.Exit(3)
}

// outcomes is an inbox.Observer that prints, for the coordinator, one line
// per committed or skipped transaction: "tx APPLIED DUPLICATES". Each line
// is one write, so a kill never leaves half a line. It also hands each
// transaction's accounts to the handler, which locks them in order (see
// lockorder.go).
type outcomes struct{ w io.Writer }

func (o outcomes) TxStart(ctx context.Context, _ string, msgs []inbox.Message) context.Context {
	return withAccounts(ctx, msgs)
}

func (o outcomes) TxEnd(_ context.Context, e *inbox.TxEvent) {
	if e.Err == nil {
		fmt.Fprintf(o.w, "tx %d %d\n", e.Applied, e.Duplicates)
	}
}

func (o outcomes) DeadLettered(_ context.Context, e *inbox.DeadLetterEvent) {
	fmt.Fprintf(o.w, "dead %s %s\n", e.MessageID, e.Reason)
}

// RunConsumer is the main of one consumer process, the hidden
// 'inboxlab chaos-consumer' command. It runs until ctx is done.
func RunConsumer(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f consumerFlags
	fs := flag.NewFlagSet("chaos-consumer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&f.slot, "slot", 0, "")
	fs.StringVar(&f.consumer, "consumer", DefaultConsumerName, "")
	fs.StringVar(&f.databaseURL, "database-url", "", "")
	fs.StringVar(&f.schema, "schema", "", "")
	f.where.Flags(fs)
	fs.BoolVar(&f.control, "control-no-skip", false, "")
	fs.BoolVar(&f.pipelined, "pipelined", false, "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if f.control && f.pipelined {
		// noSkip breaks the claims of Handle's path only.
		return errors.New("chaos consumer: --control-no-skip and --pipelined do not combine")
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
	var driver inboxdriver.Driver[pgx.Tx] = d
	if f.control {
		driver = noSkip{d}
	}
	client, err := inbox.NewClient(driver, &inbox.Config{Observer: outcomes{w: stdout}})
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
		if p.Crash != "" {
			crash(p.Crash, m.ID)
		}
		if err := lockAccounts(ctx, tx, accounts); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE `+accounts+` SET balance = balance + $1 WHERE id = $2`, p.Amount, p.Account); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO `+effects+` (consumer, event_id, account, amount, slot) VALUES ($1, $2, $3, $4, $5)`,
			f.consumer, m.ID, p.Account, p.Amount, f.slot)
		return err
	})
	var h inbox.Handler[pgx.Tx] = credit
	if f.pipelined {
		h = inboxpgx.PipelineBatchFunc(func(ctx context.Context, msgs []inbox.Message, b *pgx.Batch) error {
			if ids := accountsOf(msgs); len(ids) > 1 {
				b.Queue(lockAccountsSQL(accounts), ids)
			}
			for _, m := range msgs {
				var p payload
				if err := json.Unmarshal(m.Payload, &p); err != nil {
					return inbox.Permanent(fmt.Errorf("payload: %w", err))
				}
				if p.Crash != "" {
					crash(p.Crash, m.ID)
				}
				b.Queue(`UPDATE `+accounts+` SET balance = balance + $1 WHERE id = $2`, p.Amount, p.Account)
				b.Queue(`INSERT INTO `+effects+` (consumer, event_id, account, amount, slot) VALUES ($1, $2, $3, $4, $5)`,
					f.consumer, m.ID, p.Account, p.Amount, f.slot)
			}
			return nil
		})
	}
	return runTransportConsumer(ctx, &f, client, h)
}

// consumerLogger logs the adapter's warnings to stderr, which the
// coordinator relays to its log; INBOX_CHAOS_LOG=debug logs more.
func consumerLogger() *slog.Logger {
	level := slog.LevelWarn
	if debugLog() {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// debugLog reports whether INBOX_CHAOS_LOG=debug asks the consumers to log
// their adapter's and client's decisions too.
func debugLog() bool { return os.Getenv("INBOX_CHAOS_LOG") == "debug" }

// noSkip is a broken store for the negative control: it reports every
// claim as new, so redeliveries apply again.
type noSkip struct{ *inboxpgx.Driver }

func (n noSkip) BeginClaim(ctx context.Context, p *inboxdriver.ClaimParams) (pgx.Tx, []bool, error) {
	q := *p
	q.Pipelined = false // a deferred claim would find the duplicates
	tx, claimed, err := n.Driver.BeginClaim(ctx, &q)
	for i := range claimed {
		claimed[i] = true
	}
	return tx, claimed, err
}
