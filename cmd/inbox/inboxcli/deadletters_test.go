package inboxcli_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxmigrate"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/inboxtest"
	"github.com/txinbox/inbox/internal/require"
	"github.com/txinbox/inbox/internal/testdb"
)

func TestDeadLetters(t *testing.T) {
	t.Parallel()
	schema := testdb.Schema(t)
	env := map[string]string{"DATABASE_URL": testdb.URL(t)}
	pool, err := pgxpool.New(context.Background(), testdb.URL(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	d, err := inboxpgx.New(pool, &inboxpgx.Config{Tables: inboxdriver.Tables{Schema: schema}})
	require.NoError(t, err)
	m, err := inboxmigrate.New(d)
	require.NoError(t, err)
	_, err = m.Up(context.Background())
	require.NoError(t, err)
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

	code, stdout, _ = run(t, env, append([]string{"deadletters", "delete", fmt.Sprint(list[0].ID)}, db...)...)
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "deleted dead letter")
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
