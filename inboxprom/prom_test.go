package inboxprom_test

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver testdb creates schemas with
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxmigrate"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/inboxprom"
	"github.com/txinbox/inbox/inboxsql"
	"github.com/txinbox/inbox/inboxsql/inboxsqlite"
	"github.com/txinbox/inbox/inboxtest"
	"github.com/txinbox/inbox/internal/testdb"
	"github.com/txinbox/inbox/outbox"
)

func TestMain(m *testing.M) { testdb.Main(m) }

var pools = testdb.Shared[*pgxpool.Pool]{Query: testdb.PgxPool}

// horizon is the replay horizon the tests measure headroom against.
const horizon = time.Hour

func TestScrapePostgres(t *testing.T) {
	t.Parallel()
	pool := pools.Get(t, pgxpool.New, (*pgxpool.Pool).Close)
	d, err := inboxpgx.New(pool, &inboxpgx.Config{Tables: inboxdriver.Tables{Schema: testdb.Schema(t)}})
	require.NoError(t, err)
	migrate(t, d)
	scrapeRun(t, d, inbox.HandlerFunc[pgx.Tx](func(context.Context, pgx.Tx, inbox.Message) error { return nil }))
}

func TestScrapeSQLite(t *testing.T) {
	t.Parallel()
	db, err := inboxsqlite.Open(filepath.Join(t.TempDir(), "inbox.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	d, err := inboxsql.New(db, inboxsqlite.Engine, nil)
	require.NoError(t, err)
	migrate(t, d)
	scrapeRun(t, d, inbox.HandlerFunc[*sql.Tx](func(context.Context, *sql.Tx, inbox.Message) error { return nil }))
}

func migrate(t *testing.T, d inboxdriver.Admin) {
	t.Helper()
	m, err := inboxmigrate.New(d)
	require.NoError(t, err)
	_, err = m.Up(context.Background())
	require.NoError(t, err)
}

// store is what scrapeRun needs of a driver.
type store[TTx any] interface {
	inboxdriver.Driver[TTx]
	inboxdriver.Admin
	inboxdriver.OutboxStore[TTx]
}

// scrapeRun processes messages with duplicates of each kind, a failure and
// a dead letter, then scrapes the metrics: duplicates split by reason, and
// a retention headroom that turns negative once the rows older than the
// replay horizon are purged.
func scrapeRun[TTx any](t *testing.T, d store[TTx], ok inbox.Handler[TTx]) {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	obs, err := inboxprom.New(inboxprom.Config{Registerer: reg})
	require.NoError(t, err)
	c, err := inbox.NewClient(d, &inbox.Config{Observer: obs, ReplayHorizon: horizon})
	require.NoError(t, err)
	_, err = inboxprom.NewStatsCollector(c.Admin(), inboxprom.StatsConfig{Registerer: reg, Interval: -1})
	require.NoError(t, err)

	a, b := inboxtest.NewID(), inboxtest.NewID()
	inboxtest.RequireApplied(t)(c.Process(ctx, "billing", inbox.Message{ID: a}, ok))
	// The broker's first delivery of an applied id: the producer sent it
	// again.
	inboxtest.RequireDuplicate(t)(c.Process(ctx, "billing", inbox.Message{ID: a, Source: inbox.Source{Transport: "sqs", Attempt: 1}}, ok))
	// The broker's second delivery: our ack was lost.
	inboxtest.RequireDuplicate(t)(c.Process(ctx, "billing", inbox.Message{ID: a, Source: inbox.Source{Transport: "sqs", Attempt: 2}}, ok))
	res, err := c.ProcessBatch(ctx, "billing", []inbox.Message{{ID: b}, {ID: a, Source: inbox.Source{Redelivered: true}}}, ok)
	require.NoError(t, err)
	require.Equal(t, inbox.Applied, res[0].Outcome)
	require.Equal(t, inbox.Duplicate, res[1].Outcome)
	boom := errors.New("boom")
	_, err = c.Process(ctx, "billing", inbox.Message{ID: inboxtest.NewID()}, inbox.HandlerFunc[TTx](func(context.Context, TTx, inbox.Message) error { return boom }))
	require.ErrorIs(t, err, boom)
	require.NoError(t, c.DeadLetter(ctx, inbox.DeadLetterParams{Consumer: "billing", Message: inbox.Message{ID: inboxtest.NewID()}, Err: boom, Attempts: 5}))
	ob, err := outbox.New(d, nil)
	require.NoError(t, err)
	_, err = ob.Enqueue(ctx, outbox.Message{Topic: "orders"}, outbox.Message{Topic: "orders"})
	require.NoError(t, err)

	// Rows two horizons old: the inbox deduplicates further back than the
	// horizon, and the headroom is about one horizon.
	require.NoError(t, inboxtest.AgeRows(ctx, d, "billing", nil, 2*horizon))
	inboxtest.RequireApplied(t)(c.Process(ctx, "billing", inbox.Message{ID: inboxtest.NewID()}, ok))
	m := scrape(t, reg)
	require.Equal(t, 1.0, m[`inbox_duplicates_total{consumer="billing",reason="republish"}`])
	require.Equal(t, 2.0, m[`inbox_duplicates_total{consumer="billing",reason="redelivery"}`])
	require.Equal(t, 0.0, m[`inbox_duplicates_total{consumer="billing",reason="concurrent"}`])
	require.Equal(t, 3.0, m[`inbox_messages_total{consumer="billing",outcome="applied"}`])
	require.Equal(t, 3.0, m[`inbox_messages_total{consumer="billing",outcome="duplicate"}`])
	require.Equal(t, 1.0, m[`inbox_messages_total{consumer="billing",outcome="failed"}`])
	require.Equal(t, 1.0, m[`inbox_messages_total{consumer="billing",outcome="dead_lettered"}`])
	require.Equal(t, 1.0, m[`inbox_tx_failures_total{consumer="billing",fault="message"}`])
	require.Equal(t, 1.0, m[`inbox_dead_lettered_total{consumer="billing",reason="max_attempts"}`])
	require.Equal(t, 6.0, m[`inbox_claim_seconds_count{consumer="billing"}`])
	require.Equal(t, 3.0, m[`inbox_rows{consumer="billing"}`])
	require.Equal(t, 1.0, m[`inbox_stats_up`])
	require.Equal(t, horizon.Seconds(), m[`inbox_replay_horizon_seconds`])
	require.Equal(t, 2.0, m[`outbox_pending`])
	require.Equal(t, 0.0, m[`outbox_parked`])
	require.True(t, m[`outbox_oldest_pending_age_seconds`] >= 0, "the lag is an age")
	require.Equal(t, 0.0, m[`inbox_effects_stuck{consumer="billing"}`])
	cov := m[`inbox_dedup_coverage_seconds{consumer="billing"}`]
	require.True(t, cov >= 2*horizon.Seconds(), "coverage %v: the oldest row was aged two horizons", cov)
	require.True(t, m[`inbox_retention_headroom_seconds{consumer="billing"}`] > 0, "headroom %v", m[`inbox_retention_headroom_seconds{consumer="billing"}`])

	// A cleaner configured with a retention below the horizon deletes the
	// aged rows: only the last one is left, and a replay from one horizon
	// back would apply its messages again.
	cleaner, err := inbox.NewClient(d, &inbox.Config{ReplayHorizon: 10 * time.Minute, Retention: 30 * time.Minute})
	require.NoError(t, err)
	n, err := cleaner.Admin().Purge(ctx, inbox.PurgeParams{OlderThan: 30 * time.Minute})
	require.NoError(t, err)
	require.Equal(t, int64(2), n)
	m = scrape(t, reg)
	require.Equal(t, 1.0, m[`inbox_rows{consumer="billing"}`])
	h := m[`inbox_retention_headroom_seconds{consumer="billing"}`]
	require.True(t, h < 0, "headroom %v after the purge below the horizon", h)
	require.True(t, h >= -horizon.Seconds(), "headroom %v: coverage is not negative", h)
}

// scrape serves reg's metrics over HTTP, as Prometheus scrapes them, logs
// the inbox's lines and returns every sample by series.
func scrape(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	out := map[string]float64{}
	var excerpt strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		require.True(t, i > 0, "sample line %q", line)
		v, err := strconv.ParseFloat(line[i+1:], 64)
		require.NoError(t, err)
		out[line[:i]] = v
		if strings.HasPrefix(line, "inbox_duplicates_total") || strings.Contains(line, "headroom") || strings.Contains(line, "coverage") ||
			strings.HasPrefix(line, "inbox_rows") || strings.HasPrefix(line, "outbox_pending") {
			excerpt.WriteString(line + "\n")
		}
	}
	require.NoError(t, sc.Err())
	t.Logf("scrape:\n%s", excerpt.String())
	return out
}

func TestConfigErrors(t *testing.T) {
	_, err := inboxprom.New(inboxprom.Config{})
	require.ErrorContains(t, err, "Registerer is nil")
	reg := prometheus.NewRegistry()
	_, err = inboxprom.New(inboxprom.Config{Registerer: reg})
	require.NoError(t, err)
	_, err = inboxprom.New(inboxprom.Config{Registerer: reg})
	require.ErrorContains(t, err, "register")
	_, err = inboxprom.NewStatsCollector(nil, inboxprom.StatsConfig{Registerer: reg})
	require.ErrorContains(t, err, "source is nil")
}

func TestDeadLetterReasonBounded(t *testing.T) {
	require.Equal(t, inbox.ReasonPermanent, inboxprom.DeadLetterReason(inbox.ReasonPermanent))
	require.Equal(t, "other", inboxprom.DeadLetterReason("my own reason 42"))
}

// A claim that waits too long behind another transaction's claim of the
// same id counts as a lock timeout and a contention failure.
func TestLockTimeoutPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pools.Get(t, pgxpool.New, (*pgxpool.Pool).Close)
	d, err := inboxpgx.New(pool, &inboxpgx.Config{Tables: inboxdriver.Tables{Schema: testdb.Schema(t)}})
	require.NoError(t, err)
	migrate(t, d)
	reg := prometheus.NewRegistry()
	obs, err := inboxprom.New(inboxprom.Config{Registerer: reg})
	require.NoError(t, err)
	c, err := inbox.NewClient(d, &inbox.Config{Observer: obs, LockTimeout: 50 * time.Millisecond})
	require.NoError(t, err)

	id := inboxtest.NewID()
	tx, claimed, err := d.BeginClaim(ctx, &inboxdriver.ClaimParams{Consumer: "billing", IDs: []string{id}})
	require.NoError(t, err)
	require.Equal(t, []bool{true}, claimed)
	defer tx.Rollback(ctx)
	_, err = c.Process(ctx, "billing", inbox.Message{ID: id}, inbox.HandlerFunc[pgx.Tx](func(context.Context, pgx.Tx, inbox.Message) error { return nil }))
	require.ErrorIs(t, err, inbox.ErrLockTimeout)

	m := scrape(t, reg)
	require.Equal(t, 1.0, m[`inbox_lock_timeouts_total{consumer="billing"}`])
	require.Equal(t, 0.0, m[`inbox_tx_conflicts_total{consumer="billing"}`])
	require.Equal(t, 1.0, m[`inbox_tx_failures_total{consumer="billing",fault="contention"}`])
	require.Equal(t, 1.0, m[`inbox_messages_total{consumer="billing",outcome="failed"}`])
}

// The collector reads the store at most once per interval, and reports a
// failed read as inbox_stats_up 0 without the gauges.
func TestStatsCacheAndFailure(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := inboxsqlite.Open(filepath.Join(t.TempDir(), "inbox.db"))
	require.NoError(t, err)
	d, err := inboxsql.New(db, inboxsqlite.Engine, nil)
	require.NoError(t, err)
	migrate(t, d)
	c, err := inbox.NewClient(d, nil)
	require.NoError(t, err)
	ok := inbox.HandlerFunc[*sql.Tx](func(context.Context, *sql.Tx, inbox.Message) error { return nil })
	inboxtest.RequireApplied(t)(c.Process(ctx, "billing", inbox.Message{ID: inboxtest.NewID()}, ok))

	cached := prometheus.NewRegistry()
	_, err = inboxprom.NewStatsCollector(c.Admin(), inboxprom.StatsConfig{Registerer: cached, Interval: time.Hour})
	require.NoError(t, err)
	fresh := prometheus.NewRegistry()
	sc, err := inboxprom.NewStatsCollector(c.Admin(), inboxprom.StatsConfig{Registerer: fresh, Interval: -1})
	require.NoError(t, err)
	require.Equal(t, 1.0, scrape(t, cached)[`inbox_rows{consumer="billing"}`])
	inboxtest.RequireApplied(t)(c.Process(ctx, "billing", inbox.Message{ID: inboxtest.NewID()}, ok))
	require.Equal(t, 1.0, scrape(t, cached)[`inbox_rows{consumer="billing"}`], "within the interval the last read serves")
	require.Equal(t, 2.0, scrape(t, fresh)[`inbox_rows{consumer="billing"}`])

	require.NoError(t, db.Close())
	m := scrape(t, fresh)
	require.Equal(t, 0.0, m[`inbox_stats_up`])
	_, has := m[`inbox_rows{consumer="billing"}`]
	require.False(t, has, "a failed read reports no stale gauges")
	require.Error(t, sc.Err())
}
