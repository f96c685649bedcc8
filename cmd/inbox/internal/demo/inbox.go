package demo

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/cmd/inbox/internal/child"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxkafka"
	"github.com/txinbox/inbox/inboxsql"
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

// runInbox runs one consumer of the inbox strategy: the inboxkafka adapter
// over the real store, in consumer processes.
func runInbox(ctx context.Context, cfg *Config, st *store, k *kafka, s *scenario, consumer string) (int, error) {
	crashes := 0
	for _, life := range inboxLives {
		args := []string{
			"--database-url", st.url, "--schema", st.schema,
			"--brokers", strings.Join(k.seeds, ","), "--topic", k.topic,
			"--group", "demo-inbox-" + consumer, "--consumer", consumer,
			"--records", fmt.Sprint(len(s.records)),
		}
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
// 'inbox demo-consumer' command. It returns once every record of the topic
// has been processed and its offset committed, or dies at a fault point.
func RunConsumer(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo-consumer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("database-url", "", "")
	schema := fs.String("schema", "", "")
	brokers := fs.String("brokers", "", "")
	topic := fs.String("topic", "", "")
	group := fs.String("group", "", "")
	consumer := fs.String("consumer", "", "")
	records := fs.Int64("records", 0, "")
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
	client, err := inbox.NewClient(d, nil)
	if err != nil {
		return err
	}
	handler := inbox.HandlerFunc[*sql.Tx](func(ctx context.Context, tx *sql.Tx, msg inbox.Message) error {
		e, err := decode(&kgo.Record{Value: msg.Payload})
		if err != nil {
			return inbox.Permanent(err)
		}
		e.ID = msg.ID
		return apply(ctx, dialect, tx, "inbox", *consumer, e)
	})
	k := &kafka{seeds: strings.Split(*brokers, ","), topic: *topic}
	cl, err := kgo.NewClient(append(inboxkafka.ClientOpts(), k.groupOpts(*group)...)...)
	if err != nil {
		return err
	}
	defer cl.CloseAllowingRebalance()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var last atomic.Bool
	c, err := inboxkafka.New(cl, client, handler, &inboxkafka.Config{
		Consumer: *consumer,
		Key:      inbox.HeaderKey("event-id"),
		MaxBatch: batchSize,
		OnResult: func(r inboxkafka.Result) {
			// The last record is done: stop, which commits its offset.
			if r.Record.Offset == *records-1 && r.Err == nil && last.CompareAndSwap(false, true) {
				stop()
			}
		},
	})
	if err != nil {
		return err
	}
	return c.Run(runCtx)
}
