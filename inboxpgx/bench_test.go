package inboxpgx_test

import (
	"context"
	"testing"
	"time"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxtest"
)

// BenchmarkClaim measures the claim paths of the store, each in its own
// transaction with the client's default lock timeout: begin and claim a new
// id, then commit; the same for a batch of 100 new ids; and begin and claim
// an id already present, then roll back (the skip path); and the pipelined
// claims, each a whole transaction in one round trip. SingleNoLockTimeout
// is Single without the lock-timeout bracket. The figures of
// whole messages with a side effect, against the alternatives, come from
// 'inboxlab bench'.
func BenchmarkClaim(b *testing.B) {
	d, _ := newDriver(b, inboxdriver.Tables{})
	ctx := context.Background()
	lt := inbox.DefaultLockTimeout

	// run claims n new ids per transaction and commits, with the claim
	// deferred to the commit when pipelined.
	run := func(n int, lt time.Duration, pipelined bool) func(b *testing.B) {
		return func(b *testing.B) {
			ids := make([]string, n)
			for b.Loop() {
				for i := range ids {
					ids[i] = inboxtest.NewID()
				}
				tx, claimed, err := d.BeginClaim(ctx, &inboxdriver.ClaimParams{Consumer: "bench", IDs: ids, LockTimeout: lt, Pipelined: pipelined})
				if err != nil || (claimed == nil) != pipelined {
					b.Fatalf("claim: %v, claimed %v", err, claimed)
				}
				for i, c := range claimed {
					if !c {
						b.Fatalf("id %d was not claimed", i)
					}
				}
				if err := d.Commit(ctx, tx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "msgs/s")
		}
	}
	b.Run("Single", run(1, lt, false))
	// The same without the lock-timeout bracket (Config.LockTimeout < 0):
	// what the bound on a duplicate's wait costs.
	b.Run("SingleNoLockTimeout", run(1, 0, false))
	b.Run("Batch100", run(100, lt, false))
	// The pipelined paths: BEGIN, the claim and COMMIT in one round trip
	// (here with no work after the claim), for one id and for 100.
	b.Run("Pipelined", run(1, lt, true))
	b.Run("PipelinedBatch100", run(100, lt, true))

	b.Run("Duplicate", func(b *testing.B) {
		p := &inboxdriver.ClaimParams{Consumer: "bench", IDs: []string{inboxtest.NewID()}, LockTimeout: lt}
		tx, _, err := d.BeginClaim(ctx, p)
		if err != nil {
			b.Fatal(err)
		}
		if err := d.Commit(ctx, tx); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			tx, claimed, err := d.BeginClaim(ctx, p)
			if err != nil || claimed[0] {
				b.Fatalf("claim: %v, claimed %v", err, claimed)
			}
			if err := d.Rollback(ctx, tx); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	})
}
