package inboxpgx_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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
// 'inbox bench'.
func BenchmarkClaim(b *testing.B) {
	d, _ := newDriver(b, inboxdriver.Tables{})
	ctx := context.Background()
	lt := inbox.DefaultLockTimeout

	single := func(lt time.Duration) func(b *testing.B) {
		return func(b *testing.B) {
			for b.Loop() {
				tx, claimed, err := d.BeginClaim(ctx, &inboxdriver.ClaimParams{Consumer: "bench", ID: inboxtest.NewID(), LockTimeout: lt})
				if err != nil || !claimed {
					b.Fatalf("claim: %v, claimed %v", err, claimed)
				}
				if err := d.Commit(ctx, tx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		}
	}
	b.Run("Single", single(lt))
	// The same without the lock-timeout bracket (Config.LockTimeout < 0):
	// what the bound on a duplicate's wait costs.
	b.Run("SingleNoLockTimeout", single(0))

	b.Run("Batch100", func(b *testing.B) {
		ids := make([]string, 100)
		for b.Loop() {
			for i := range ids {
				ids[i] = inboxtest.NewID()
			}
			tx, claimed, err := d.BeginClaimBatch(ctx, &inboxdriver.ClaimBatchParams{Consumer: "bench", IDs: ids, LockTimeout: lt})
			if err != nil {
				b.Fatal(err)
			}
			for i, c := range claimed {
				if !c {
					b.Fatalf("id %d of the batch was not claimed", i)
				}
			}
			if err := d.Commit(ctx, tx); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*len(ids))/b.Elapsed().Seconds(), "msgs/s")
	})

	// The pipelined paths: BEGIN, the claim and COMMIT in one round trip
	// (here with no work after the claim), for one id and for 100.
	b.Run("Pipelined", func(b *testing.B) {
		for b.Loop() {
			claimed, workErr, err := d.ProcessPipelined(ctx, &inboxdriver.ClaimParams{Consumer: "bench", ID: inboxtest.NewID(), LockTimeout: lt}, &pgx.Batch{})
			if err != nil || workErr != nil || !claimed {
				b.Fatalf("pipelined claim: %v, %v, claimed %v", err, workErr, claimed)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	})
	b.Run("PipelinedBatch100", func(b *testing.B) {
		ids := make([]string, 100)
		for b.Loop() {
			for i := range ids {
				ids[i] = inboxtest.NewID()
			}
			claimed, workErr, err := d.ProcessPipelinedBatch(ctx, &inboxdriver.ClaimBatchParams{Consumer: "bench", IDs: ids, LockTimeout: lt}, &pgx.Batch{})
			if err != nil || workErr != nil || !claimed {
				b.Fatalf("pipelined claim: %v, %v, claimed %v", err, workErr, claimed)
			}
		}
		b.ReportMetric(float64(b.N*len(ids))/b.Elapsed().Seconds(), "msgs/s")
	})

	b.Run("Duplicate", func(b *testing.B) {
		id := inboxtest.NewID()
		tx, claimed, err := d.BeginClaim(ctx, &inboxdriver.ClaimParams{Consumer: "bench", ID: id})
		if err != nil || !claimed {
			b.Fatalf("claim: %v, claimed %v", err, claimed)
		}
		if err := d.Commit(ctx, tx); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			tx, claimed, err := d.BeginClaim(ctx, &inboxdriver.ClaimParams{Consumer: "bench", ID: id, LockTimeout: lt})
			if err != nil || claimed {
				b.Fatalf("claim: %v, claimed %v", err, claimed)
			}
			if err := d.Rollback(ctx, tx); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	})
}
