package inboxsql_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxmigrate"
	"github.com/txinbox/inbox/inboxsql"
	"github.com/txinbox/inbox/inboxsql/inboxsqlite"
	"github.com/txinbox/inbox/internal/uuid"
)

// benchClient is a client over a fresh SQLite file opened with OpenSQLite.
func benchClient(b *testing.B, cfg *inbox.Config) *inbox.Client[*sql.Tx] {
	b.Helper()
	db, err := inboxsqlite.Open(filepath.Join(b.TempDir(), "bench.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	d, err := inboxsql.New(db, engineOf(inboxsql.SQLite), nil)
	if err != nil {
		b.Fatal(err)
	}
	m, err := inboxmigrate.New(d)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := m.Up(context.Background()); err != nil {
		b.Fatal(err)
	}
	c, err := inbox.NewClient(d, cfg)
	if err != nil {
		b.Fatal(err)
	}
	return c
}

var noop = inbox.HandlerFunc[*sql.Tx](func(context.Context, *sql.Tx, inbox.Message) error { return nil })

func reportClaims(b *testing.B, claims int) {
	b.ReportMetric(float64(claims)/b.Elapsed().Seconds(), "claims/s")
}

// BenchmarkSQLiteClaim measures the claim path on SQLite: begin, claim,
// an empty handler, commit, through Client.Process and ProcessBatch, with
// each commit synced to disk (synchronous=FULL).
//
//	go test -run '^$' -bench BenchmarkSQLiteClaim -benchtime 3s ./inboxsql/
func BenchmarkSQLiteClaim(b *testing.B) {
	ctx := context.Background()
	b.Run("single", func(b *testing.B) {
		c := benchClient(b, nil)
		for b.Loop() {
			if _, err := c.Process(ctx, "billing", inbox.Message{ID: uuid.V4()}, noop); err != nil {
				b.Fatal(err)
			}
		}
		reportClaims(b, b.N)
	})
	b.Run("single/no-lock-timeout", func(b *testing.B) {
		// Without a LockTimeout the claim does not set busy_timeout
		// around itself: this is the cost of the bracket.
		c := benchClient(b, &inbox.Config{LockTimeout: -1})
		for b.Loop() {
			if _, err := c.Process(ctx, "billing", inbox.Message{ID: uuid.V4()}, noop); err != nil {
				b.Fatal(err)
			}
		}
		reportClaims(b, b.N)
	})
	b.Run("single/parallel", func(b *testing.B) {
		// Concurrent writers serialise on SQLite's write lock. A writer
		// waits for it without a LockTimeout, up to the busy timeout,
		// and a busy error is retried: on an overloaded machine an fsync
		// can stall longer than the default LockTimeout.
		c := benchClient(b, &inbox.Config{LockTimeout: -1, MaxConflictRetries: 100})
		start := time.Now()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := c.Process(ctx, "billing", inbox.Message{ID: uuid.V4()}, noop); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "claims/s")
	})
	batch := func(b *testing.B, newID func() string) {
		c := benchClient(b, nil)
		msgs := make([]inbox.Message, 100)
		for b.Loop() {
			for i := range msgs {
				msgs[i] = inbox.Message{ID: newID()}
			}
			rs, err := c.ProcessBatch(ctx, "billing", msgs, noop)
			if err != nil {
				b.Fatal(err)
			}
			for _, r := range rs {
				if r.Err != nil || r.Outcome != inbox.Applied {
					b.Fatalf("%v %v", r.Outcome, r.Err)
				}
			}
		}
		reportClaims(b, 100*b.N)
	}
	// Random ids land all over the primary key's b-tree, so each batch
	// writes many pages to the WAL; time-ordered ids append.
	b.Run("batch100", func(b *testing.B) { batch(b, uuid.V4) })
	b.Run("batch100/uuidv7", func(b *testing.B) { batch(b, func() string { return uuid.V7(time.Now()) }) })
}
