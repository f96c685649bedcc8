package inboxcli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxtype"
	"github.com/txinbox/inbox/internal/command"
	"github.com/txinbox/inbox/internal/duration"
)

func runDeadLetters(ctx context.Context, e *Env, args []string) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
			fmt.Fprintln(e.Stdout, "Usage: inbox deadletters list|show|replay|delete [flags]\n\nRun 'inbox deadletters <subcommand> -h' for its flags.\n\n"+
				replayNote)
			return nil
		}
		return command.Usagef("want a subcommand: list, show, replay or delete")
	}
	sub, args := args[0], args[1:]
	var sf storeFlags
	switch sub {
	case "list":
		fs := command.NewFlags(e, "deadletters list", "deadletters list [--consumer C] [--limit N] [--json] [flags]")
		sf.register(fs)
		consumer := fs.String("consumer", "", "only this consumer's dead letters")
		limit := fs.Int("limit", 50, "at most this many, newest first")
		asJSON := fs.Bool("json", false, "print one JSON array")
		if err := fs.Parse(args, 0); err != nil {
			return err
		}
		if *limit <= 0 {
			return command.Usagef("--limit %d: must be positive", *limit)
		}
		if *consumer != "" {
			if err := checkConsumer(*consumer); err != nil {
				return err
			}
		}
		return withAdmin(ctx, e, &sf, nil, func(c *inbox.Admin) error {
			ds, err := c.DeadLetterList(ctx, inboxtype.DeadLetterListParams{Consumer: *consumer, Limit: *limit})
			if err != nil {
				return err
			}
			now := time.Now()
			return printRows(e.Stdout, ds, *asJSON, toJSON, "no dead letters",
				"ID\tCONSUMER\tMESSAGE\tREASON\tATTEMPTS\tLAST SEEN\tSOURCE", func(d *inboxtype.DeadLetter) string {
					msg := d.MessageID
					if msg == "" {
						msg = "(no valid id)"
					}
					return fmt.Sprintf("%d\t%s\t%s\t%s\t%d\t%s ago\t%s", d.ID, command.Text(d.Consumer), command.Text(msg), command.Text(d.Reason), d.Attempts,
						duration.Format(now.Sub(d.LastSeen).Round(time.Second)), command.Text(source(d)))
				})
		})
	case "show", "delete":
		fs := command.NewFlags(e, "deadletters "+sub, "deadletters "+sub+" ID"+map[bool]string{true: " [--dry-run]"}[sub == "delete"]+" [flags]")
		sf.register(fs)
		asJSON, dryRun := new(bool), new(bool)
		if sub == "show" {
			asJSON = fs.Bool("json", false, "print one JSON object")
		} else {
			dryRun = fs.Bool("dry-run", false, "say which dead letter would be deleted, and delete nothing")
		}
		// Take the ID before the flags too: 'show 7 --json'.
		if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
			args = append(args[1:], args[0])
		}
		if err := fs.Parse(args, 1); err != nil {
			return err
		}
		if fs.NArg() != 1 {
			return command.Usagef("want the dead letter's ID")
		}
		id, err := strconv.ParseInt(fs.Arg(0), 10, 64)
		if err != nil || id <= 0 {
			return command.Usagef("dead letter ID %q: want a positive number", fs.Arg(0))
		}
		return withAdmin(ctx, e, &sf, nil, func(c *inbox.Admin) error {
			d, err := c.DeadLetterGet(ctx, id)
			if err != nil {
				return deadLetterErr(id, err)
			}
			if sub == "delete" {
				// Say which message the ID named, so that a mistyped ID
				// is seen: with --dry-run before anything is deleted.
				what := fmt.Sprintf("dead letter %d (consumer %s, message %s, reason %s, %s)", id, command.Text(d.Consumer),
					command.Text(cmp.Or(d.MessageID, "(no valid id)")), command.Text(d.Reason), command.Count(d.Attempts, "attempt", "attempts"))
				if *dryRun {
					fmt.Fprintf(e.Stdout, "would delete %s\n", what)
					return nil
				}
				if err := c.DeadLetterDelete(ctx, id); err != nil {
					return deadLetterErr(id, err)
				}
				fmt.Fprintf(e.Stdout, "deleted %s\n", what)
				return nil
			}
			if *asJSON {
				return json.NewEncoder(e.Stdout).Encode(toJSON(d))
			}
			printDeadLetter(e, d)
			return nil
		})
	case "replay":
		return runReplay(ctx, e, args)
	default:
		return command.Usagef("unknown subcommand %q: want list, show, replay or delete", sub)
	}
}

// replayNote says what 'deadletters replay' does, and why.
const replayNote = `A replay runs the consumer's handler, which only the application has. So
'inbox deadletters replay' marks dead letters for replay, and the application
replays the marked ones with its handler, exactly once each, when it calls
inbox.Client.ProcessReplays(ctx, consumer, handler): for instance on a
ticker beside its consumer. A message applied meanwhile is a duplicate, and
its dead letter is deleted; one whose handler fails again stays, unmarked,
with the new error.`

// runReplay marks one dead letter, or every one of a consumer, for replay.
func runReplay(ctx context.Context, e *Env, args []string) error {
	fs := command.NewFlags(e, "deadletters replay", "deadletters replay ID | --consumer C --all [--dry-run] [flags]\n\n"+replayNote)
	var sf storeFlags
	sf.register(fs)
	consumer := fs.String("consumer", "", "mark every dead letter of this consumer (with --all)")
	all := fs.Bool("all", false, "with --consumer: mark all of its dead letters")
	dryRun := fs.Bool("dry-run", false, "say how many dead letters would be marked, and mark none")
	// Take the ID before the flags too: 'replay 7 --schema s'.
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		args = append(args[1:], args[0])
	}
	if err := fs.Parse(args, 1); err != nil {
		return err
	}
	switch {
	case fs.NArg() == 1 && (*consumer != "" || *all):
		return command.Usagef("give a dead letter's ID, or --consumer C --all, not both")
	case fs.NArg() == 1:
		id, err := strconv.ParseInt(fs.Arg(0), 10, 64)
		if err != nil || id <= 0 {
			return command.Usagef("dead letter ID %q: want a positive number", fs.Arg(0))
		}
		return withAdmin(ctx, e, &sf, nil, func(c *inbox.Admin) error {
			d, err := c.DeadLetterGet(ctx, id)
			if err != nil {
				return deadLetterErr(id, err)
			}
			marked, err := c.DeadLetterReplay(ctx, inbox.DeadLetterReplayParams{ID: id, DryRun: *dryRun})
			if errors.Is(err, inbox.ErrNoMessageID) {
				return &saidError{msg: fmt.Sprintf("dead letter %d (reason %s) cannot be replayed: its message has no id: fix the producer and publish it again", id, d.Reason), err: err}
			}
			if err != nil {
				return deadLetterErr(id, err)
			}
			if marked == 0 {
				fmt.Fprintf(e.Stdout, "dead letter %d was already marked for replay: the next inbox.Client.ProcessReplays for %s replays it\n", id, command.Text(d.Consumer))
				return nil
			}
			verb := "marked"
			if *dryRun {
				verb = "would mark"
			}
			fmt.Fprintf(e.Stdout, "%s dead letter %d (%s, message %s) for replay: the next inbox.Client.ProcessReplays for %s replays it with the handler\n",
				verb, id, command.Text(d.Consumer), command.Text(d.MessageID), command.Text(d.Consumer))
			return nil
		})
	case *consumer == "" && *all:
		return command.Usagef("--all needs --consumer: a replay runs one consumer's handler")
	case *consumer == "":
		return command.Usagef("want the dead letter's ID, or --consumer C --all")
	case !*all:
		return command.Usagef("--consumer %s marks every dead letter of %s for replay: add --all to confirm", *consumer, *consumer)
	}
	if err := checkConsumer(*consumer); err != nil {
		return err
	}
	return withAdmin(ctx, e, &sf, nil, func(c *inbox.Admin) error {
		// Say how many it will mark before it marks them: with
		// --dry-run, instead.
		n, err := c.DeadLetterReplay(ctx, inbox.DeadLetterReplayParams{Consumer: *consumer, DryRun: true})
		if err != nil {
			return err
		}
		letters := command.Count(n, "dead letter", "dead letters")
		if *dryRun || n == 0 {
			verb := map[bool]string{true: "would mark", false: "marked"}[*dryRun]
			fmt.Fprintf(e.Stdout, "%s %s of %s for replay\n", verb, letters, *consumer)
			fmt.Fprintln(e.Stdout, "(dead letters already marked, and those without a valid message id, are not counted: no replay can apply the latter)")
			return nil
		}
		fmt.Fprintf(e.Stdout, "marking %s of %s for replay\n", letters, *consumer)
		n, err = c.DeadLetterReplay(ctx, inbox.DeadLetterReplayParams{Consumer: *consumer})
		if err != nil {
			return err
		}
		fmt.Fprintf(e.Stdout, "marked %s of %s for replay: the next inbox.Client.ProcessReplays for %s replays them with the handler\n",
			command.Count(n, "dead letter", "dead letters"), *consumer, *consumer)
		return nil
	})
}

// withAdmin opens the store the flags name, runs fn with an Admin over it
// with base (nil for the defaults) and the id format of the store's id
// column, and closes the store. An error that says the inbox tables are
// missing is explained (store.explain).
func withAdmin(ctx context.Context, e *Env, sf *storeFlags, base *inbox.Config, fn func(c *inbox.Admin) error) error {
	s, err := sf.open(ctx, e)
	if err != nil {
		return err
	}
	defer s.close()
	c, err := inbox.NewAdmin(s.admin, s.config(base))
	if err != nil {
		return err
	}
	return s.explain(ctx, fn(c))
}

// printRows prints a list command's rows: with asJSON one JSON array of
// toJSON's values (empty, not null, when there are none); else a table of
// header and a line a row, or empty alone when there are no rows.
func printRows[T, J any](w io.Writer, rows []T, asJSON bool, toJSON func(T) J, empty, header string, line func(T) string) error {
	if asJSON {
		out := make([]J, 0, len(rows))
		for _, r := range rows {
			out = append(out, toJSON(r))
		}
		return json.NewEncoder(w).Encode(out)
	}
	if len(rows) == 0 {
		fmt.Fprintln(w, empty)
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, r := range rows {
		fmt.Fprintln(tw, line(r))
	}
	return tw.Flush()
}

func source(d *inboxtype.DeadLetter) string {
	return inbox.Source{Transport: d.Transport, Queue: d.Queue, Partition: d.Partition, Offset: d.Offset, BrokerID: d.BrokerID}.String()
}

// deadLetterJSON is the JSON form of a dead letter. A payload that is not
// UTF-8 text is given in base64, with payload_base64 set.
type deadLetterJSON struct {
	ID            int64             `json:"id"`
	Consumer      string            `json:"consumer"`
	MessageID     string            `json:"message_id"`
	Reason        string            `json:"reason"`
	Error         string            `json:"error"`
	Attempts      int               `json:"attempts"`
	FirstSeen     time.Time         `json:"first_seen"`
	LastSeen      time.Time         `json:"last_seen"`
	Source        string            `json:"source"`
	Headers       map[string]string `json:"headers"`
	Payload       string            `json:"payload"`
	PayloadBase64 bool              `json:"payload_base64,omitempty"`
}

func toJSON(d *inboxtype.DeadLetter) deadLetterJSON {
	j := deadLetterJSON{
		ID: d.ID, Consumer: d.Consumer, MessageID: d.MessageID, Reason: d.Reason, Error: d.Error,
		Attempts: d.Attempts, FirstSeen: d.FirstSeen.UTC(), LastSeen: d.LastSeen.UTC(), Source: source(d),
		Headers: d.Headers, Payload: string(d.Payload),
	}
	if !utf8.Valid(d.Payload) {
		b, _ := json.Marshal(d.Payload) // a []byte marshals as base64
		j.Payload, j.PayloadBase64 = strings.Trim(string(b), `"`), true
	}
	return j
}

// printDeadLetter prints one dead letter for a terminal: its stored text
// escaped (command.Text), its headers in order, and its payload labelled
// text or base64.
func printDeadLetter(e *Env, d *inboxtype.DeadLetter) {
	fmt.Fprintf(e.Stdout, "id:          %d\nconsumer:    %s\nmessage id:  %s\nreason:      %s\nerror:       %s\nattempts:    %d\n",
		d.ID, command.Text(d.Consumer), command.Text(d.MessageID), command.Text(d.Reason), command.Text(d.Error), d.Attempts)
	fmt.Fprintf(e.Stdout, "first seen:  %s\nlast seen:   %s\nsource:      %s\n", d.FirstSeen.UTC().Format(time.RFC3339), d.LastSeen.UTC().Format(time.RFC3339), command.Text(source(d)))
	for _, k := range slices.Sorted(maps.Keys(d.Headers)) {
		fmt.Fprintf(e.Stdout, "header:      %s: %s\n", command.Text(k), command.Text(d.Headers[k]))
	}
	fmt.Fprintf(e.Stdout, "payload:     %s\n", command.Payload(d.Payload, 64<<10))
}

// deadLetterErr says that dead letter id is not there, or returns err.
func deadLetterErr(id int64, err error) error {
	if errors.Is(err, inbox.ErrNotFound) {
		return &saidError{msg: fmt.Sprintf("dead letter %d: not found", id), err: err}
	}
	return err
}
