package demo

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/cmd/inboxlab/internal/broker"
	"github.com/txinbox/inbox/cmd/inboxlab/internal/child"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxsql"
	"github.com/txinbox/inbox/internal/command"
	"github.com/txinbox/inbox/internal/fault"
)

// inboxLives are the crashes of the inbox strategy: each life of the
// consumer is a process that kills itself with SIGKILL at the n-th hit of a
// fault point in the real code path; the last life runs to the end.
var inboxLives = []struct {
	w      window
	faults string
}{
	{afterEffect, "after-effect-before-commit@2"},
	{afterCommit, "after-commit-before-ack@2"},
	{midBatch, "mid-batch@2"},
	{-1, ""},
}

// runInbox runs one consumer of the inbox strategy: the transport's inbox
// adapter (inboxkafka, inboxnats, inboxrabbit) over the real store, in
// consumer processes.
func runInbox(ctx context.Context, cfg *Config, st *store, t broker.Topic, s *scenario, consumer string) (int, error) {
	where := t.Address(subscription("inbox", consumer)).Args()
	crashes := 0
	for _, life := range inboxLives {
		args := append([]string{
			"--database-url", st.url, "--schema", st.schema,
			"--consumer", consumer,
			"--records", fmt.Sprint(len(s.records)),
		}, where...)
		cmd := cfg.Command(args)
		if life.faults != "" {
			cmd.Env = append(cmd.Environ(), "INBOX_FAULTS="+life.faults)
		}
		// A consumer dies with the demo, whatever ends it.
		child.DieWithParent(cmd)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			return crashes, err
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		var err error
		select {
		case err = <-done:
		case <-time.After(90 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			return crashes, fmt.Errorf("inbox consumer made no progress in 90s: %s", stderr.String())
		case <-ctx.Done():
			_ = cmd.Process.Kill()
			<-done
			command.Cleaned(ctx, "killed the inbox's %s consumer", consumer)
			return crashes, ctx.Err()
		}
		var ee *exec.ExitError
		switch {
		case err == nil:
			return crashes, nil
		case errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL:
			crashes++
			fmt.Fprintf(cfg.Log, "demo: inbox/%s crashed %s\n", consumer, life.w)
		default:
			return crashes, fmt.Errorf("inbox consumer: %v: %s", err, stderr.String())
		}
	}
	return crashes, errors.New("the last life of the inbox consumer crashed")
}

// RunConsumer is the main of one life of an inbox consumer, the hidden
// 'inboxlab demo-consumer' command. It returns once every record has been
// processed and acknowledged, or dies at a fault point.
func RunConsumer(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo-consumer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("database-url", "", "")
	schema := fs.String("schema", "", "")
	consumer := fs.String("consumer", "", "")
	records := fs.Int64("records", 0, "")
	var where broker.Address
	where.Flags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := fault.ArmFromEnv(); err != nil {
		return err
	}
	db, dialect, err := openAgain(*url, *schema)
	if err != nil {
		return err
	}
	defer db.Close()
	d, err := inboxsql.New(db, engine(dialect), &inboxsql.Config{Tables: inboxdriver.Tables{Schema: *schema}})
	if err != nil {
		return err
	}
	var w *watch
	var icfg *inbox.Config
	if where.Transport == TransportRabbitMQ {
		w = &watch{last: strconv.FormatInt(*records-1, 10)}
		icfg = &inbox.Config{Observer: w}
	}
	client, err := inbox.NewClient(d, icfg)
	if err != nil {
		return err
	}
	handler := inbox.HandlerFunc[*sql.Tx](func(ctx context.Context, tx *sql.Tx, msg inbox.Message) error {
		e, err := decodeBody(msg.Payload)
		if err != nil {
			return inbox.Permanent(err)
		}
		e.ID = msg.ID
		return apply(ctx, dialect, tx, "inbox", *consumer, e)
	})
	switch where.Transport {
	case TransportKafka:
		return runKafkaConsumer(ctx, &where, client, handler, *consumer, *records)
	case TransportNATS:
		return runNATSConsumer(ctx, &where, client, handler, *consumer)
	case TransportRabbitMQ:
		return runRabbitConsumer(ctx, &where, client, handler, *consumer, w)
	default:
		return fmt.Errorf("demo-consumer: --transport %q: want kafka, nats or rabbitmq", where.Transport)
	}
}

// watch is the inbox client's Observer in a consumer process: it tells
// when the last record went through a committed transaction, and how long
// the consumer has been idle.
type watch struct {
	last string // the headerIndex of the last record

	mu       sync.Mutex
	inFlight int
	lastEnd  time.Time
	sawLast  chan struct{} // closed once; replaced by arm
	closed   bool
}

type watchKey struct{}

// arm starts watching for a new run of the consumer.
func (w *watch) arm() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sawLast, w.closed, w.lastEnd = make(chan struct{}), false, time.Now()
	return w.sawLast
}

// idle reports whether no transaction is open and none ended for d.
func (w *watch) idle(d time.Duration) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.inFlight == 0 && time.Since(w.lastEnd) >= d
}

func (w *watch) TxStart(ctx context.Context, _ string, msgs []inbox.Message) context.Context {
	w.mu.Lock()
	w.inFlight++
	w.mu.Unlock()
	return context.WithValue(ctx, watchKey{}, msgs)
}

func (w *watch) TxEnd(ctx context.Context, e *inbox.TxEvent) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.inFlight--
	w.lastEnd = time.Now()
	if e.Err != nil || w.closed || w.sawLast == nil {
		return
	}
	msgs, _ := ctx.Value(watchKey{}).([]inbox.Message)
	for _, m := range msgs {
		if m.Headers[headerIndex] == w.last {
			close(w.sawLast)
			w.closed = true
			return
		}
	}
}

func (w *watch) DeadLettered(context.Context, *inbox.DeadLetterEvent) {}

var _ inbox.Observer = (*watch)(nil)
