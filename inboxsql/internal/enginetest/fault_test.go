package inboxsql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxsql"
	"github.com/txinbox/inbox/inboxsql/inboxpostgres"
	"github.com/txinbox/inbox/inboxtest"
	"github.com/txinbox/inbox/internal/testdb"
)

// A connection the server refuses is unavailability whatever the reason
// it gives (MySQL 1049 no such database, Postgres 3D000): the store's fault,
// never the message's.
func TestRefusedConnectionIsUnavailable(t *testing.T) {
	t.Parallel()
	missing := "no_such_database_" + testdb.RandomSuffix()
	u, err := url.Parse(testdb.URL(t))
	require.NoError(t, err)
	u.Path = "/" + missing
	pg, err := inboxpostgres.Open(u.String())
	require.NoError(t, err)
	defer pg.Close()
	my, err := sql.Open("mysql", testdb.MySQLDSN(t, missing))
	require.NoError(t, err)
	defer my.Close()
	for _, tc := range []struct {
		name string
		db   *sql.DB
		d    inboxsql.Dialect
		code string
	}{
		{"sql-postgres", pg, inboxsql.Postgres, "3D000"},
		{"mariadb", my, inboxsql.MariaDB, "1049"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := inboxsql.New(tc.db, engineOf(tc.d), nil)
			require.NoError(t, err)
			c, err := inbox.NewClient(d, nil)
			require.NoError(t, err)
			noop := inbox.HandlerFunc[*sql.Tx](func(context.Context, *sql.Tx, inbox.Message) error { return nil })
			_, err = c.Process(context.Background(), "billing", inbox.Message{ID: inboxtest.NewID()}, noop)
			require.ErrorContains(t, err, tc.code)
			require.Equal(t, inboxdriver.ClassUnavailable, d.Classify(err))
			require.ErrorIs(t, err, inbox.ErrUnavailable)
			require.Equal(t, inbox.FaultStore, inbox.Judge(err))
		})
	}
}

// A handler's own io.EOF is the message's on every engine, while the
// transaction's connection still answers: the batch is split around it.
func TestHandlersOwnEOFIsTheMessages(t *testing.T) {
	for _, e := range engines {
		if e.effectsDB != nil {
			continue
		}
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			d, _ := e.newDriver(t)
			c, err := inbox.NewClient(d, nil)
			require.NoError(t, err)
			poison := fmt.Errorf("decode: %w", io.ErrUnexpectedEOF)
			msgs := []inbox.Message{{ID: inboxtest.NewID()}, {ID: inboxtest.NewID()}, {ID: inboxtest.NewID()}}
			h := inbox.HandlerFunc[*sql.Tx](func(ctx context.Context, tx *sql.Tx, m inbox.Message) error {
				if m.ID == msgs[1].ID {
					return poison
				}
				return nil
			})
			rs, err := c.ProcessBatch(context.Background(), "billing", msgs, h)
			require.NoError(t, err)
			require.NoError(t, rs[0].Err)
			require.NoError(t, rs[2].Err)
			require.True(t, errors.Is(rs[1].Err, poison))
			require.NotErrorIs(t, rs[1].Err, inbox.ErrUnavailable)
			require.Equal(t, inbox.FaultMessage, inbox.Judge(rs[1].Err))
		})
	}
}
