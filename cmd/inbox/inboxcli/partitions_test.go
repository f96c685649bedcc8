package inboxcli_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxtest"
	"github.com/txinbox/inbox/internal/testdb"
)

func TestPartitions(t *testing.T) {
	t.Parallel()
	schema := testdb.Schema(t)
	url := testdb.URL(t)
	env := map[string]string{"DATABASE_URL": url}
	db := []string{"--schema", schema}
	cmd := func(args ...string) []string { return append(args, db...) }

	code, stdout, stderr := run(t, env, cmd("partitions", "list")...)
	require.Equal(t, 1, code, "no inbox yet: %s", stdout)
	requireOneLine(t, stderr)

	code, stdout, stderr = run(t, env, cmd("migrate", "up", "--partitioned")...)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "applied 001_inbox")

	code, stdout, stderr = run(t, env, cmd("partitions", "list")...)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "inbox_p"+time.Now().UTC().Format("20060102"))
	require.Regexp(t, `ids from \S+ to \S+ are taken: 30d\S* back and 7d\S* ahead`, stdout)
	code, stdout, _ = run(t, env, cmd("partitions", "list", "--json")...)
	require.Equal(t, 0, code)
	var list struct {
		Partitions []struct{ Name, State string }
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &list))
	require.Len(t, list.Partitions, 38)

	code, stdout, stderr = run(t, env, cmd("partitions", "premake", "--ahead", "9d")...)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "made 2: ")
	code, stdout, _ = run(t, env, cmd("partitions", "premake")...)
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "nothing to do")

	// Rows in two partitions, at the same place in each: an old event
	// processed long ago and a new one.
	d := pgxDriver(t, inboxdriver.Tables{Schema: schema, Layout: inboxdriver.LayoutPartitioned})
	c, err := inbox.NewClient(d, nil)
	require.NoError(t, err)
	noop := inbox.HandlerFunc[pgx.Tx](func(context.Context, pgx.Tx, inbox.Message) error { return nil })
	old := inboxtest.NewIDAt(time.Now().Add(-20 * 24 * time.Hour))
	inboxtest.RequireApplied(t)(c.Process(context.Background(), "billing", inbox.Message{ID: old}, noop))
	// processed_at is the database's clock: the old row is made old.
	require.NoError(t, inboxtest.AgeRows(context.Background(), d, "billing", []string{old}, 40*24*time.Hour))
	recent := inboxtest.NewID()
	inboxtest.RequireApplied(t)(c.Process(context.Background(), "billing", inbox.Message{ID: recent}, noop))

	// The commands find the layout in the database: this purge deletes
	// the old row only.
	code, stdout, stderr = run(t, env, cmd("purge", "--older-than", "30d")...)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "purged 1 row older")
	inboxtest.RequireDuplicate(t)(c.Process(context.Background(), "billing", inbox.Message{ID: recent}, noop))
	inboxtest.RequireApplied(t)(c.Process(context.Background(), "billing", inbox.Message{ID: old}, noop))

	code, stdout, stderr = run(t, env, cmd("stats")...)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "partitions: 40 attached; ids from ")
	code, stdout, _ = run(t, env, cmd("stats", "--json")...)
	require.Equal(t, 0, code)
	require.Contains(t, stdout, `"partitions":{"now":`)

	code, _, stderr = run(t, env, cmd("partitions", "drop", "--retention", "7d")...)
	require.Equal(t, 2, code, "a retention inside the replay horizon is a usage mistake")
	requireOneLine(t, stderr)
	require.Contains(t, stderr, "shorter than the replay horizon 14d plus")
	code, stdout, stderr = run(t, env, cmd("partitions", "drop", "--retention", "10d", "--replay-horizon", "7d", "--dry-run")...)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "would drop 20: ", "the 20 days from 30 to 10 days back")
	inboxtest.RequireDuplicate(t)(c.Process(context.Background(), "billing", inbox.Message{ID: old}, noop))
	code, stdout, stderr = run(t, env, cmd("partitions", "drop", "--retention", "10d", "--replay-horizon", "7d")...)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "dropped 20: ")
	require.Regexp(t, `ids from \S+ to \S+ are taken: 10d\S* back`, stdout)
	_, err = c.Process(context.Background(), "billing", inbox.Message{ID: old}, noop)
	require.ErrorIs(t, err, inbox.ErrIDExpired)

	// The plain layout has no partitions.
	plain := testdb.Schema(t)
	code, _, stderr = run(t, env, "migrate", "up", "--schema", plain)
	require.Equal(t, 0, code, stderr)
	code, stdout, _ = run(t, env, "stats", "--schema", plain)
	require.Equal(t, 0, code)
	require.NotContains(t, stdout, "partitions")
	code, _, stderr = run(t, env, "partitions", "list", "--schema", plain)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "not partitioned")
	require.False(t, strings.Contains(stderr, "\n\n"))

	for _, args := range [][]string{
		{"partitions"}, {"partitions", "split"}, {"partitions", "drop"},
		{"partitions", "premake", "--ahead", "1h"}, {"partitions", "drop", "--retention", "x"},
	} {
		code, _, stderr := run(t, env, cmd(args...)...)
		require.Equal(t, 2, code, "%v: %s", args, stderr)
		requireOneLine(t, stderr)
	}
}

// 'inbox partitions adopt' moves a plain inbox to the partitioned layout:
// its ids stay duplicates, stats show the frozen table, and a drop that
// leaves none of its ids inside the partitions retires it.
func TestPartitionsAdopt(t *testing.T) {
	t.Parallel()
	schema := testdb.Schema(t)
	url := testdb.URL(t)
	env := map[string]string{"DATABASE_URL": url}
	cmd := func(args ...string) []string { return append(args, "--schema", schema) }
	ctx := context.Background()

	code, _, stderr := run(t, env, cmd("migrate", "up")...)
	require.Equal(t, 0, code, stderr)
	plain := pgxDriver(t, inboxdriver.Tables{Schema: schema})
	pc, err := inbox.NewClient(plain, nil)
	require.NoError(t, err)
	noop := inbox.HandlerFunc[pgx.Tx](func(context.Context, pgx.Tx, inbox.Message) error { return nil })
	old := inbox.Message{ID: inboxtest.NewIDAt(time.Now().Add(-20 * 24 * time.Hour))}
	inboxtest.RequireApplied(t)(pc.Process(ctx, "billing", old, noop))

	code, stdout, stderr := run(t, env, cmd("partitions", "adopt", "--dry-run")...)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "would make the partitioned inbox beside the plain one")
	code, stdout, stderr = run(t, env, cmd("partitions", "adopt")...)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "switched after 1 attempt(s): the inbox is partitioned (39 partitions made), and the plain table is frozen as inbox_frozen")
	require.Contains(t, stdout, "frozen plain table inbox_frozen: ")
	code, stdout, stderr = run(t, env, cmd("partitions", "adopt")...)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "adopted already")
	inboxtest.RequireDuplicate(t)(pc.Process(ctx, "billing", old, noop))

	code, stdout, stderr = run(t, env, cmd("stats")...)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "partitions: 39 attached; ids from ")
	require.Contains(t, stdout, "frozen plain table inbox_frozen: ")
	code, stdout, _ = run(t, env, cmd("stats", "--json")...)
	require.Equal(t, 0, code)
	var st struct {
		Partitions struct {
			Frozen *struct {
				Name      string
				Consulted bool
			}
		}
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &st))
	require.NotNil(t, st.Partitions.Frozen)
	require.Equal(t, "inbox_frozen", st.Partitions.Frozen.Name)
	require.True(t, st.Partitions.Frozen.Consulted)

	code, stdout, stderr = run(t, env, cmd("partitions", "drop", "--retention", "10d", "--replay-horizon", "7d")...)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "retired the frozen plain table inbox_frozen")
	_, err = pc.Process(ctx, "billing", old, noop)
	require.ErrorIs(t, err, inbox.ErrIDExpired)
	code, stdout, _ = run(t, env, cmd("stats")...)
	require.Equal(t, 0, code)
	require.NotContains(t, stdout, "frozen")

	code, _, stderr = run(t, env, cmd("partitions", "adopt")...)
	require.Equal(t, 1, code, "nothing to adopt")
	require.Contains(t, stderr, "partitioned already")
	code, _, stderr = run(t, env, cmd("partitions", "adopt", "--attempts", "0")...)
	require.Equal(t, 2, code)
	requireOneLine(t, stderr)
}
