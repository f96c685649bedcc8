package inboxadmin_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxadmin"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/inboxtest"
	"github.com/txinbox/inbox/internal/testdb"
)

// TestPartitioned shows the partitions of a partitioned inbox, and counts
// the coverage from the oldest partition's lower bound.
func TestPartitioned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pools.Get(t, pgxpool.New, (*pgxpool.Pool).Close)
	d, err := inboxpgx.New(pool, &inboxpgx.Config{
		Tables:     inboxdriver.Tables{Schema: testdb.Schema(t), Layout: inboxdriver.LayoutPartitioned},
		Partitions: inboxdriver.PartitionConfig{MaxSkew: time.Hour},
	})
	require.NoError(t, err)
	migrate(t, d)
	c, err := inbox.NewClient(d, nil)
	require.NoError(t, err)
	_, err = c.Process(ctx, "billing", inbox.Message{ID: inboxtest.NewID()}, inbox.HandlerFunc[pgx.Tx](func(context.Context, pgx.Tx, inbox.Message) error { return nil }))
	require.NoError(t, err)
	st, err := c.Admin().Partitions(ctx)
	require.NoError(t, err)
	oldest, _ := st.Range()

	h, err := inboxadmin.New(c, nil)
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://localhost/?format=json", nil))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	ov := decode[inboxadmin.OverviewJSON](t, rec.Body.Bytes())
	require.NotNil(t, ov.Partitions)
	require.Equal(t, len(st.Partitions), ov.Partitions.Count)
	require.True(t, ov.Partitions.OldestBound.Equal(oldest), "%v != %v", ov.Partitions.OldestBound, oldest)
	require.Len(t, ov.Consumers, 1)
	// The coverage runs from the oldest bound, not from the one row.
	require.True(t, ov.Consumers[0].CoverageS >= ov.Now.Sub(oldest).Seconds()-1, "coverage %v from %v", ov.Consumers[0].CoverageS, oldest)

	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://localhost/", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	require.Contains(t, rec.Body.String(), "<h2>Partitions</h2>")
}
