package agent

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/runner"
	"github.com/chronoscron/chronos/agent/store"
)

// BenchmarkClaimLedger10k measures Fire (the locked compare-and-set in the
// store, its durable write, and the fsynced ledger line) with 10,000 jobs in
// the store. Runs are held open so only claims are measured.
func BenchmarkClaimLedger10k(b *testing.B) { benchClaimLedger(b, 10000) }

// BenchmarkClaimLedger measures the same claim with 100, 1,000 and 10,000
// jobs in the store: its cost must not grow with the number of jobs. Each
// size reports the mean and the 99th percentile of one claim.
func BenchmarkClaimLedger(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("jobs=%d", n), func(b *testing.B) { benchClaimLedger(b, n) })
	}
}

func benchClaimLedger(b *testing.B, jobs int) {
	home := b.TempDir()
	clock := &fakeClock{t: t0}
	g := newGate()
	rt, err := Open(context.Background(), Config{Home: home, Now: clock.Now, Retention: -1,
		Runners: map[string]runner.Runner{"gate": g}})
	if err != nil {
		b.Fatal(err)
	}
	proto, _, err := rt.ValidateJob(JobSpec{ID: "proto", Schedule: "every 1m", Overlap: "allow",
		Payload: runner.Payload{Kind: "gate"}})
	if err != nil {
		b.Fatal(err)
	}
	err = rt.Store().Update(context.Background(), func(st *store.State) error {
		for i := range jobs {
			j := proto.Clone()
			j.ID = fmt.Sprintf("job-%05d", i)
			if err := st.Add(&j); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	go func() {
		for range g.started {
		}
	}()
	slot := *proto.NextRunAt
	clock.Set(slot)
	took := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id := fmt.Sprintf("job-%05d", i%jobs)
		if i > 0 && i%jobs == 0 {
			slot = slot.Add(time.Minute)
			clock.Set(slot)
		}
		start := time.Now()
		res, err := rt.Fire(context.Background(), id, slot, TriggerScheduled)
		took = append(took, time.Since(start))
		if err != nil || res.Status != FireAccepted {
			b.Fatalf("fire %s: %+v %v", id, res, err)
		}
	}
	b.StopTimer()
	slices.Sort(took)
	b.ReportMetric(float64(took[(len(took)*99)/100].Microseconds()), "p99-µs")
	close(g.all)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := rt.Close(ctx); err != nil {
		b.Fatal(err)
	}
	close(g.started) // every run has ended: stop the drain
}
