package inboxcli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxtype"
	"github.com/txinbox/inbox/internal/command"
	"github.com/txinbox/inbox/internal/duration"
)

// outboxFlags are the store flags of the outbox commands.
func outboxFlags(fs *command.FlagSet, sf *storeFlags) {
	sf.register(fs)
	fs.StringVar(&sf.tables.Outbox, "outbox-table", inboxdriver.DefaultOutboxTable, "the outbox table")
	fs.StringVar(&sf.tables.OutboxKeys, "outbox-keys-table", inboxdriver.DefaultOutboxKeysTable, "the table of the outbox's key sequences (ordered mode)")
}

// withOutbox opens the store and runs fn with its outbox.
func withOutbox(ctx context.Context, e *Env, sf *storeFlags, fn func(a inboxdriver.OutboxAdmin) error) error {
	s, err := sf.open(ctx, e)
	if err != nil {
		return err
	}
	defer s.close()
	a, ok := s.admin.(inboxdriver.OutboxAdmin)
	if !ok {
		return fmt.Errorf("the store at %s keeps no outbox", s.where)
	}
	return s.explain(ctx, fn(a))
}

// outboxStats reads the statistics of a, the outbox of a store's driver,
// with inbox.Admin.OutboxStats.
func outboxStats(ctx context.Context, a inboxdriver.OutboxAdmin) (*inboxtype.OutboxStats, error) {
	d, ok := a.(inboxdriver.Admin)
	if !ok {
		return nil, inbox.ErrNoOutbox
	}
	admin, err := inbox.NewAdmin(d, nil)
	if err != nil {
		return nil, err
	}
	return admin.OutboxStats(ctx)
}

func runOutbox(ctx context.Context, e *Env, args []string) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
			fmt.Fprintln(e.Stdout, "Usage: inbox outbox stats|list|show|retry|park|unpark [flags]\n\nRun 'inbox outbox <subcommand> -h' for its flags.\n\n"+
				"The outbox holds the events that producers enqueued and no relay has published yet; 'inbox relay' publishes them.")
			return nil
		}
		return command.Usagef("want a subcommand: stats, list, show, retry, park or unpark")
	}
	sub, args := args[0], args[1:]
	switch sub {
	case "stats":
		return runOutboxStats(ctx, e, args)
	case "list":
		return runOutboxList(ctx, e, args)
	case "show", "retry", "park", "unpark":
		return runOutboxEvent(ctx, e, sub, args)
	default:
		return command.Usagef("unknown subcommand %q: want stats, list, show, retry, park or unpark", sub)
	}
}

// runOutboxStats is 'inbox outbox stats': the outbox's counts and lag.
func runOutboxStats(ctx context.Context, e *Env, args []string) error {
	var sf storeFlags
	fs := command.NewFlags(e, "outbox stats", "outbox stats [--json] [flags]")
	outboxFlags(fs, &sf)
	asJSON := fs.Bool("json", false, "print one JSON object")
	if err := fs.Parse(args, 0); err != nil {
		return err
	}
	return withOutbox(ctx, e, &sf, func(a inboxdriver.OutboxAdmin) error {
		st, err := outboxStats(ctx, a)
		if err != nil {
			return err
		}
		if *asJSON {
			return json.NewEncoder(e.Stdout).Encode(outboxStatsJSON{
				Pending: st.Pending, Parked: st.Parked, Published: st.Published,
				OldestPending: st.OldestPending, LagSeconds: st.Lag.Seconds(),
			})
		}
		fmt.Fprintf(e.Stdout, "pending    %d\nparked     %d\npublished  %d (kept)\n", st.Pending, st.Parked, st.Published)
		if st.Pending > 0 {
			fmt.Fprintf(e.Stdout, "lag        %s (the oldest pending event's age)\n", duration.Format(st.Lag.Round(time.Millisecond)))
		}
		if st.Parked > 0 {
			fmt.Fprintln(e.Stdout, "\nParked events wait for you: 'inbox outbox list --state parked', then 'inbox outbox unpark ID'.")
		}
		return nil
	})
}

// runOutboxList is 'inbox outbox list': the events, oldest first.
func runOutboxList(ctx context.Context, e *Env, args []string) error {
	var sf storeFlags
	fs := command.NewFlags(e, "outbox list", "outbox list [--state pending|parked|published] [--limit N] [--json] [flags]")
	outboxFlags(fs, &sf)
	state := fs.String("state", "", "only events in this state: pending, parked or published")
	limit := fs.Int("limit", 50, "at most this many, oldest first")
	asJSON := fs.Bool("json", false, "print one JSON array")
	if err := fs.Parse(args, 0); err != nil {
		return err
	}
	switch inboxdriver.OutboxState(*state) {
	case "", inboxdriver.OutboxPending, inboxdriver.OutboxParked, inboxdriver.OutboxPublished:
	default:
		return command.Usagef("--state %q: want pending, parked or published", *state)
	}
	if *limit <= 0 {
		return command.Usagef("--limit %d: must be positive", *limit)
	}
	return withOutbox(ctx, e, &sf, func(a inboxdriver.OutboxAdmin) error {
		rows, err := a.OutboxList(ctx, &inboxdriver.OutboxListParams{State: inboxdriver.OutboxState(*state), Limit: *limit})
		if err != nil {
			return fmt.Errorf("list the outbox: %w", err)
		}
		now := time.Now()
		return printRows(e.Stdout, rows, *asJSON, outboxJSON, "no events",
			"ID\tTOPIC\tKEY\tSTATE\tREJECTIONS\tAGE\tLAST ERROR", func(r *inboxdriver.OutboxRow) string {
				return fmt.Sprintf("%s\t%s\t%s\t%s\t%d\t%s\t%s", r.ID, command.Text(r.Topic), command.Text(command.Clip(string(r.Key), 24)), rowState(r), r.Attempts,
					duration.Format(now.Sub(r.CreatedAt).Round(time.Second)), command.Text(command.Clip(command.OneLine(r.LastError), 60)))
			})
	})
}

// runOutboxEvent is 'inbox outbox show|retry|park|unpark ID': it prints
// one event, or changes its state.
func runOutboxEvent(ctx context.Context, e *Env, sub string, args []string) error {
	var sf storeFlags
	fs := command.NewFlags(e, "outbox "+sub, "outbox "+sub+" ID [flags]")
	outboxFlags(fs, &sf)
	asJSON := fs.Bool("json", false, "print one JSON object (show)")
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		args = append(args[1:], args[0])
	}
	if err := fs.Parse(args, 1); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return command.Usagef("want the event's id: inbox outbox %s ID", sub)
	}
	return withOutbox(ctx, e, &sf, func(a inboxdriver.OutboxAdmin) error {
		id, err := outboxID(a.Tables().IDType, fs.Arg(0))
		if err != nil {
			return err
		}
		if sub == "show" {
			return showOutboxEvent(ctx, e, a, id, *asJSON)
		}
		return setOutboxEvent(ctx, e, a, sub, id)
	})
}

// showOutboxEvent prints the event id.
func showOutboxEvent(ctx context.Context, e *Env, a inboxdriver.OutboxAdmin, id string, asJSON bool) error {
	r, err := a.OutboxGet(ctx, id)
	if errors.Is(err, inboxdriver.ErrNotFound) {
		return &saidError{msg: fmt.Sprintf("no event %s in the outbox", id), err: inbox.ErrNotFound}
	}
	if err != nil {
		return fmt.Errorf("read event %s: %w", id, err)
	}
	if asJSON {
		return json.NewEncoder(e.Stdout).Encode(outboxJSON(r))
	}
	printOutboxRow(e, r)
	return nil
}

// setOutboxEvent retries, parks or unparks the event id, as sub says.
func setOutboxEvent(ctx context.Context, e *Env, a inboxdriver.OutboxAdmin, sub, id string) error {
	action := map[string]inboxdriver.OutboxAction{
		"retry": inboxdriver.OutboxRetryNow, "park": inboxdriver.OutboxParkRow, "unpark": inboxdriver.OutboxUnpark,
	}[sub]
	ok, err := a.OutboxSet(ctx, &inboxdriver.OutboxSetParams{ID: id, Action: action, Now: time.Now()})
	if err != nil {
		return fmt.Errorf("%s event %s: %w", sub, id, err)
	}
	if !ok {
		want := map[string]string{"retry": "pending", "park": "pending", "unpark": "parked"}[sub]
		return &saidError{msg: fmt.Sprintf("no %s event %s in the outbox", want, id), err: inbox.ErrNotFound}
	}
	fmt.Fprintf(e.Stdout, "%s: %s\n", map[string]string{
		"retry": "available to the relays now", "park": "parked: no relay publishes it until you unpark it",
		"unpark": "pending again, with a fresh budget of rejections",
	}[sub], id)
	return nil
}

// outboxID canonicalises an event id as the store's id column holds it.
func outboxID(column inboxdriver.IDType, raw string) (string, error) {
	format := inbox.IDFormatUUID
	if column == inboxdriver.IDTypeText {
		format = inbox.IDFormatText
	}
	id, err := format.CanonicalID(raw)
	if err != nil {
		return "", command.Usagef("%v", err)
	}
	return id, nil
}

func rowState(r *inboxdriver.OutboxRow) string {
	switch {
	case !r.PublishedAt.IsZero():
		return "published"
	case !r.ParkedAt.IsZero():
		return "parked"
	case r.Claimed && r.AvailableAt.After(time.Now()):
		return "claimed"
	case r.AvailableAt.After(time.Now()):
		return "backoff"
	default:
		return "pending"
	}
}

func printOutboxRow(e *Env, r *inboxdriver.OutboxRow) {
	tw := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "id\t%s\n", r.ID)
	fmt.Fprintf(tw, "topic\t%s\n", command.Text(r.Topic))
	fmt.Fprintf(tw, "key\t%s\n", command.Text(command.Clip(string(r.Key), 200)))
	if r.KeySeq > 0 {
		fmt.Fprintf(tw, "key sequence\t%d\n", r.KeySeq)
	}
	if r.CausationID != "" {
		fmt.Fprintf(tw, "caused by\t%s\n", command.Text(r.CausationID))
	}
	fmt.Fprintf(tw, "state\t%s\n", rowState(r))
	fmt.Fprintf(tw, "enqueued\t%s\n", r.CreatedAt.Format(time.RFC3339Nano))
	fmt.Fprintf(tw, "available\t%s\n", r.AvailableAt.Format(time.RFC3339Nano))
	fmt.Fprintf(tw, "rejections\t%d\n", r.Attempts)
	if r.LastError != "" {
		fmt.Fprintf(tw, "last error\t%s\n", command.Text(command.OneLine(r.LastError)))
	}
	if !r.ParkedAt.IsZero() {
		fmt.Fprintf(tw, "parked\t%s\n", r.ParkedAt.Format(time.RFC3339Nano))
	}
	if !r.PublishedAt.IsZero() {
		fmt.Fprintf(tw, "published\t%s\n", r.PublishedAt.Format(time.RFC3339Nano))
	}
	for _, k := range slices.Sorted(maps.Keys(r.Headers)) {
		fmt.Fprintf(tw, "header %s\t%s\n", command.Text(k), command.Text(r.Headers[k]))
	}
	fmt.Fprintf(tw, "payload\t%s\n", command.Payload(r.Payload, 2000))
	tw.Flush()
}

type outboxStatsJSON struct {
	Pending       int64     `json:"pending"`
	Parked        int64     `json:"parked"`
	Published     int64     `json:"published"`
	OldestPending time.Time `json:"oldest_pending,omitzero"`
	LagSeconds    float64   `json:"lag_seconds"`
}

// outboxRowJSON is the JSON form of an outbox row. A key or payload that is
// not UTF-8 text is given as a base64 string.
type outboxRowJSON struct {
	ID          string            `json:"id"`
	Topic       string            `json:"topic"`
	Key         any               `json:"key"`
	KeySeq      int64             `json:"key_seq,omitempty"`
	CausationID string            `json:"causation_id,omitempty"`
	State       string            `json:"state"`
	Rejections  int               `json:"rejections"`
	LastError   string            `json:"last_error,omitempty"`
	CreatedAt   time.Time         `json:"created_at"`
	AvailableAt time.Time         `json:"available_at"`
	ParkedAt    time.Time         `json:"parked_at,omitzero"`
	PublishedAt time.Time         `json:"published_at,omitzero"`
	Headers     map[string]string `json:"headers"`
	Payload     any               `json:"payload"`
}

func outboxJSON(r *inboxdriver.OutboxRow) outboxRowJSON {
	text := func(b []byte) any {
		if b == nil {
			return nil
		}
		if utf8.Valid(b) {
			return string(b)
		}
		return b // base64
	}
	return outboxRowJSON{
		ID: r.ID, Topic: r.Topic, Key: text(r.Key), KeySeq: r.KeySeq, CausationID: r.CausationID,
		State: rowState(r), Rejections: r.Attempts, LastError: r.LastError,
		CreatedAt: r.CreatedAt, AvailableAt: r.AvailableAt, ParkedAt: r.ParkedAt, PublishedAt: r.PublishedAt,
		Headers: r.Headers, Payload: text(r.Payload),
	}
}
