package outboxchaos

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver testdb creates schemas with

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox/cmd/inboxlab/internal/child/childtest"
	"github.com/txinbox/inbox/internal/dbfault"
	"github.com/txinbox/inbox/internal/testdb"
)

// childEnv makes this test binary a child of a run.
const childEnv = "INBOX_OUTBOX_CHAOS_CHILD"

func TestMain(m *testing.M) {
	childtest.Run(childEnv, "outbox chaos child", func(ctx context.Context, args []string) error {
		return RunChild(ctx, args, os.Stderr)
	})
	testdb.Main(m)
}

// A short run kills producers, relays and consumers, relays among them
// after Kafka confirmed, under database faults and terminated sessions,
// and every invariant holds.
func TestChaosOutbox(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := Run(ctx, Config{
		DatabaseURL: testdb.URL(t),
		Duration:    12 * time.Second,
		Command:     func(args []string) *exec.Cmd { return childtest.Command(childEnv, args) },
		Log:         t.Output(),
	})
	require.NoError(t, err)
	t.Logf("%+v", *res)
	require.True(t, res.OK, "%+v", *res)
	require.Positive(t, res.Orders)
	require.Positive(t, res.RelayKills, "a relay was killed")
	require.Positive(t, res.Republished, "a killed relay's events were published again")
	require.Positive(t, res.ProducerKills+res.ConsumerKills)
	injected := 0
	for kind, n := range res.DBFaults {
		require.Contains(t, []string{"revoke-insert", "read-only"}, kind, "the default faults")
		injected += n
	}
	require.Positive(t, injected, "the run must inject database faults: %v", res.DBFaults)
	require.Positive(t, res.DBKills, "the run must terminate the children's database sessions")
}

// A database fault kind that does not exist is refused before anything
// starts.
func TestChaosOutboxConfigDBFaults(t *testing.T) {
	t.Parallel()
	_, err := Run(context.Background(), Config{DatabaseURL: "postgres://nowhere", DBFaults: []dbfault.Kind{"flood"},
		Command: func([]string) *exec.Cmd { return nil }})
	require.ErrorContains(t, err, `unknown fault "flood"`)
}
