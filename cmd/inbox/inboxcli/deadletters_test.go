package inboxcli_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/cmd/inbox/inboxcli"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxtest"
	"github.com/txinbox/inbox/inboxtype"
	"github.com/txinbox/inbox/internal/testdb"
)

func TestDeadLetters(t *testing.T) {
	t.Parallel()
	d, schema := migratedPgx(t)
	env := map[string]string{"DATABASE_URL": testdb.URL(t)}
	c, err := inbox.NewClient(d, nil)
	require.NoError(t, err)
	id := inboxtest.NewID()
	require.NoError(t, c.DeadLetter(context.Background(), inbox.DeadLetterParams{Consumer: "billing",
		Message: inbox.Message{ID: id, Payload: []byte(`{"amount_cents":100}`), Headers: map[string]string{"event-id": id},
			Source: inbox.Source{Transport: "kafka", Queue: "orders", Partition: 2, Offset: 99}},
		Err: inbox.Permanent(errors.New("card declined")), Attempts: 1}))
	require.NoError(t, c.DeadLetter(context.Background(), inbox.DeadLetterParams{Consumer: "inventory",
		Message: inbox.Message{Payload: []byte{0xff, 0x00}, Source: inbox.Source{Transport: "sqs", Queue: "q", BrokerID: "m-7"}},
		Err:     inbox.ErrNoMessageID, Attempts: 1}))

	db := []string{"--schema", schema}
	code, stdout, stderr := run(t, env, append([]string{"deadletters", "list"}, db...)...)
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, `billing\s+`+id+`\s+permanent\s+1\s+\S+ ago\s+kafka:orders/2@99`, stdout)
	require.Regexp(t, `inventory\s+\(no valid id\)\s+no_id`, stdout)

	code, stdout, _ = run(t, env, append([]string{"deadletters", "list", "--consumer", "billing", "--json"}, db...)...)
	require.Equal(t, 0, code)
	var list []struct {
		ID        int64  `json:"id"`
		MessageID string `json:"message_id"`
		Error     string `json:"error"`
		Payload   string `json:"payload"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &list))
	require.Len(t, list, 1)
	require.Equal(t, id, list[0].MessageID)
	require.Contains(t, list[0].Error, "card declined")
	require.Equal(t, `{"amount_cents":100}`, list[0].Payload)

	code, stdout, _ = run(t, env, append([]string{"deadletters", "show", fmt.Sprint(list[0].ID)}, db...)...)
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "header:      event-id: "+id)

	code, stdout, _ = run(t, env, append([]string{"deadletters", "list", "--consumer", "inventory", "--json"}, db...)...)
	require.Equal(t, 0, code)
	require.Contains(t, stdout, `"payload":"/wA=","payload_base64":true`)

	// A delete says which message the ID named: with --dry-run, before
	// deleting anything.
	what := fmt.Sprintf("dead letter %d (consumer billing, message %s, reason permanent, 1 attempt)\n", list[0].ID, id)
	code, stdout, stderr = run(t, env, append([]string{"deadletters", "delete", fmt.Sprint(list[0].ID), "--dry-run"}, db...)...)
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "would delete "+what, stdout)
	code, _, stderr = run(t, env, append([]string{"deadletters", "show", fmt.Sprint(list[0].ID)}, db...)...)
	require.Equal(t, 0, code, "the dry run deleted nothing: %s", stderr)
	code, stdout, _ = run(t, env, append([]string{"deadletters", "delete", fmt.Sprint(list[0].ID)}, db...)...)
	require.Equal(t, 0, code)
	require.Equal(t, "deleted "+what, stdout)
	code, _, stderr = run(t, env, append([]string{"deadletters", "show", fmt.Sprint(list[0].ID)}, db...)...)
	require.Equal(t, 1, code)
	requireOneLine(t, stderr)
	require.Equal(t, fmt.Sprintf("inbox deadletters: dead letter %d: not found\n", list[0].ID), stderr, "said once")

	for _, args := range [][]string{{"deadletters"}, {"deadletters", "show"}, {"deadletters", "show", "x"}, {"deadletters", "purge"}} {
		code, _, stderr := run(t, env, args...)
		require.Equal(t, 2, code, strings.Join(args, " "))
		requireOneLine(t, stderr)
	}
}

// 'inbox deadletters replay' marks dead letters; the application replays
// them with its handler. Two replays of one dead letter race, from the
// command line and then in the application: the message is applied once.
func TestDeadLetterReplay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := testdb.Schema(t)
	env := map[string]string{"DATABASE_URL": testdb.URL(t)}
	db := []string{"--schema", schema}
	code, _, stderr := run(t, env, append([]string{"migrate", "up"}, db...)...)
	require.Equal(t, 0, code, stderr)
	pool := inboxcli.SharedPool(t)
	d := pgxDriver(t, inboxdriver.Tables{Schema: schema})
	c, err := inbox.NewClient(d, nil)
	require.NoError(t, err)
	effects := pgx.Identifier{schema, "effects"}.Sanitize()
	_, err = pool.Exec(ctx, `CREATE TABLE `+effects+` (message_id uuid NOT NULL)`)
	require.NoError(t, err)

	deadLetter := func(consumer string, m inbox.Message) string {
		t.Helper()
		require.NoError(t, c.DeadLetter(ctx, inbox.DeadLetterParams{Consumer: consumer, Message: m, Err: errors.New("declined"), Attempts: 5}))
		ds, err := c.Admin().DeadLetterList(ctx, inboxtype.DeadLetterListParams{Consumer: consumer, Limit: 100})
		require.NoError(t, err)
		for _, dl := range ds {
			if dl.MessageID == m.ID {
				return fmt.Sprint(dl.ID)
			}
		}
		t.Fatalf("no dead letter of %s for %q", consumer, m.ID)
		return ""
	}
	id1, id2 := inboxtest.NewID(), inboxtest.NewID()
	dl1 := deadLetter("billing", inbox.Message{ID: id1, Payload: []byte(`{}`)})
	dl2 := deadLetter("billing", inbox.Message{ID: id2, Payload: []byte(`{}`)})
	noID := deadLetter("billing", inbox.Message{Payload: []byte(`?`), Source: inbox.Source{Transport: "sqs", Queue: "q", BrokerID: "m-1"}})

	for _, args := range [][]string{
		{"deadletters", "replay"},
		{"deadletters", "replay", "x"},
		{"deadletters", "replay", dl1, "--consumer", "billing"},
		{"deadletters", "replay", "--consumer", "billing"},
		{"deadletters", "replay", "--all"},
		{"deadletters", "replay", "--consumer", "bill\x00ing", "--all"},
	} {
		code, stdout, stderr := run(t, env, append(args, db...)...)
		require.Equal(t, 2, code, "%v: %s", args, stderr)
		require.Empty(t, stdout, "%v", args)
		requireOneLine(t, stderr)
	}
	code, _, stderr = run(t, env, append([]string{"deadletters", "replay", noID}, db...)...)
	require.Equal(t, 1, code)
	requireOneLine(t, stderr)
	require.Contains(t, stderr, "cannot be replayed: its message has no id")
	require.NotContains(t, stderr, "inbox: ", "said in the command's words")
	code, _, stderr = run(t, env, append([]string{"deadletters", "replay", "987654321"}, db...)...)
	require.Equal(t, 1, code)
	require.Equal(t, "inbox deadletters: dead letter 987654321: not found\n", stderr)

	// A dry run says what it would mark, and marks nothing: one of the
	// two operators below still marks it.
	code, stdout, stderr := run(t, env, append([]string{"deadletters", "replay", dl1, "--dry-run"}, db...)...)
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "would mark dead letter "+dl1+" (billing, message "+id1+") for replay: the next inbox.Client.ProcessReplays for billing replays it with the handler\n", stdout)

	// Two operators mark the same dead letter at once: one marks it.
	type result struct {
		code   int
		stdout string
	}
	results := make(chan result, 2)
	for range 2 {
		go func() {
			code, stdout, _ := run(t, env, append([]string{"deadletters", "replay", dl1}, db...)...)
			results <- result{code, stdout}
		}()
	}
	var outs []string
	for range 2 {
		r := <-results
		require.Equal(t, 0, r.code)
		outs = append(outs, r.stdout)
	}
	joined := strings.Join(outs, "")
	require.Equal(t, 1, strings.Count(joined, "marked dead letter "+dl1+" (billing, message "+id1+") for replay"), joined)
	require.Equal(t, 1, strings.Count(joined, "dead letter "+dl1+" was already marked for replay"), joined)

	// The application replays the marked dead letter with its handler, in
	// two processes at once: it is applied once, and deleted.
	credit := inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, m inbox.Message) error {
		_, err := tx.Exec(ctx, `INSERT INTO `+effects+` VALUES ($1)`, m.ID)
		return err
	})
	replays := make(chan []inbox.ReplayResult, 2)
	for range 2 {
		go func() {
			rs, err := c.ProcessReplays(ctx, "billing", credit)
			if err != nil {
				t.Error(err)
			}
			replays <- rs
		}()
	}
	applied := 0
	for range 2 {
		for _, r := range <-replays {
			require.NoError(t, r.Err)
			require.Equal(t, id1, r.DeadLetter.MessageID, "only the marked dead letter")
			if r.Outcome == inbox.Applied {
				applied++
			}
		}
	}
	require.Equal(t, 1, applied)
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+effects+` WHERE message_id = $1`, id1).Scan(&n))
	require.Equal(t, 1, n, "the effect happened once")
	_, err = c.Admin().DeadLetterGet(ctx, mustInt(t, dl1))
	require.ErrorIs(t, err, inbox.ErrNotFound)

	// Every dead letter of a consumer: those with an id. It says how many
	// before it marks them; with --dry-run it only says.
	for range 2 {
		code, stdout, stderr = run(t, env, append([]string{"deadletters", "replay", "--consumer", "billing", "--all", "--dry-run"}, db...)...)
		require.Equal(t, 0, code, stderr)
		require.True(t, strings.HasPrefix(stdout, "would mark 1 dead letter of billing for replay\n"), stdout)
	}
	code, stdout, stderr = run(t, env, append([]string{"deadletters", "replay", "--consumer", "billing", "--all"}, db...)...)
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "marking 1 dead letter of billing for replay\n"+
		"marked 1 dead letter of billing for replay: the next inbox.Client.ProcessReplays for billing replays them with the handler\n", stdout)
	code, stdout, stderr = run(t, env, append([]string{"deadletters", "replay", "--consumer", "billing", "--all", "--dry-run"}, db...)...)
	require.Equal(t, 0, code, stderr)
	require.True(t, strings.HasPrefix(stdout, "would mark 0 dead letters of billing for replay\n"), "marked ones are not counted: %s", stdout)
	rs, err := c.ProcessReplays(ctx, "billing", credit)
	require.NoError(t, err)
	require.Len(t, rs, 1)
	require.Equal(t, id2, rs[0].DeadLetter.MessageID)
	require.Equal(t, inbox.Applied, rs[0].Outcome)
	_, err = c.Admin().DeadLetterGet(ctx, mustInt(t, dl2))
	require.ErrorIs(t, err, inbox.ErrNotFound)

	// Tables migrated before replays existed: the command says to migrate.
	code, _, stderr = run(t, env, append([]string{"migrate", "down", "--to", "3"}, db...)...)
	require.Equal(t, 0, code, stderr)
	code, _, stderr = run(t, env, append([]string{"deadletters", "replay", noID}, db...)...)
	require.Equal(t, 1, code)
	requireOneLine(t, stderr)
	require.Contains(t, stderr, "run 'inbox migrate up'")
}

func mustInt(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	require.NoError(t, err)
	return n
}

// 'deadletters show' prints stored text escaped, so that a header or an
// error that holds terminal escapes cannot act on the operator's terminal;
// its headers in order; and its payload labelled text or base64.
func TestDeadLetterShowIsSafeOnATerminal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, schema := migratedPgx(t)
	env := map[string]string{"DATABASE_URL": testdb.URL(t)}
	c, err := inbox.NewClient(d, nil)
	require.NoError(t, err)
	require.NoError(t, c.DeadLetter(ctx, inbox.DeadLetterParams{Consumer: "billing",
		Message: inbox.Message{ID: inboxtest.NewID(), Payload: []byte{0x1b, 0xff, 0x00},
			Headers: map[string]string{"z-last": "1", "a-first": "\x1b[2Jcleared", "m-mid": "rtl\u202eevil"},
			Source:  inbox.Source{Transport: "kafka", Queue: "orders\x1b[31m"}},
		Err: inbox.Permanent(errors.New("boom\x1b]0;title\a")), Attempts: 1}))
	list, err := c.Admin().DeadLetterList(ctx, inboxtype.DeadLetterListParams{Consumer: "billing", Limit: 1})
	require.NoError(t, err)
	require.Len(t, list, 1)

	for _, args := range [][]string{{"deadletters", "show", fmt.Sprint(list[0].ID)}, {"deadletters", "list"}} {
		code, stdout, stderr := run(t, env, append(args, "--schema", schema)...)
		require.Equal(t, 0, code, stderr)
		require.NotContains(t, stdout, "\x1b", "%v: no escape reaches the terminal", args)
		require.NotContains(t, stdout, "\a", "%v", args)
		require.NotContains(t, stdout, "\u202e", "%v", args)
		require.Contains(t, stdout, `orders\x1b[31m`, "%v: the escape is shown, escaped", args)
		if args[1] == "show" {
			require.Contains(t, stdout, `boom\x1b]0;title\x07`)
			require.Contains(t, stdout, "payload:     (base64, 3 bytes) G/8A")
			a, m, z := strings.Index(stdout, "a-first"), strings.Index(stdout, "m-mid"), strings.Index(stdout, "z-last")
			require.True(t, a < m && m < z, "headers in order: %s", stdout)
			require.Contains(t, stdout, `header:      a-first: \x1b[2Jcleared`)
			require.Contains(t, stdout, `header:      m-mid: rtl\u202eevil`)
		}
	}
}

// Text written by another tool, or by an older version that did not check
// names, reaches no terminal raw: a consumer name that holds an escape
// sequence is shown escaped by every command that prints it, in its
// output and in its errors.
func TestStoredNamesAreEscapedEverywhere(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, schema := migratedPgx(t)
	env := map[string]string{"DATABASE_URL": testdb.URL(t)}
	c, err := inbox.NewClient(d, nil)
	require.NoError(t, err)
	id := inboxtest.NewID()
	inboxtest.RequireApplied(t)(c.Process(ctx, "billing", inbox.Message{ID: id},
		inbox.HandlerFunc[pgx.Tx](func(context.Context, pgx.Tx, inbox.Message) error { return nil })))
	_, _, err = d.EffectBegin(ctx, &inboxdriver.EffectBeginParams{
		EffectKeyParams: inboxdriver.EffectKeyParams{Consumer: "billing", ID: id, Step: "capture"}, Now: time.Now().Add(-time.Hour)})
	require.NoError(t, err)
	require.NoError(t, c.DeadLetter(ctx, inbox.DeadLetterParams{Consumer: "billing",
		Message: inbox.Message{ID: inboxtest.NewID()}, Err: inbox.Permanent(errors.New("boom")), Attempts: 1}))
	const evil = "bill\x1b[2Jing"
	for _, table := range []string{"inbox", "inbox_dead_letters", "inbox_effects"} {
		_, err := inboxcli.SharedPool(t).Exec(ctx, `UPDATE `+pgx.Identifier{schema, table}.Sanitize()+` SET consumer_name = $1`, evil)
		require.NoError(t, err)
	}
	list, err := c.Admin().DeadLetterList(ctx, inboxtype.DeadLetterListParams{Limit: 1})
	require.NoError(t, err)
	require.Len(t, list, 1)

	for _, args := range [][]string{
		{"stats"},
		{"deadletters", "list"},
		{"deadletters", "replay", fmt.Sprint(list[0].ID)},
		{"deadletters", "replay", fmt.Sprint(list[0].ID)}, // already marked
		{"doctor"},
	} {
		_, stdout, stderr := run(t, env, append(args, "--schema", schema)...)
		require.NotContains(t, stdout+stderr, "\x1b", "%v: no escape reaches the terminal", args)
		require.Contains(t, stdout+stderr, `bill\x1b[2Jing`, "%v: the name is shown, escaped", args)
	}
}
