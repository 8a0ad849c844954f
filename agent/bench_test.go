package agent

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/runner"
	"github.com/chronoscron/chronos/agent/store"
)

// BenchmarkClaimLedger10k measures Fire (the locked compare-and-set on
// jobs.json, its durable rewrite, and the fsynced ledger line) with 10,000
// jobs in the store. Runs are held open so only claims are measured.
func BenchmarkClaimLedger10k(b *testing.B) {
	const jobs = 10000
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
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id := fmt.Sprintf("job-%05d", i%jobs)
		if i > 0 && i%jobs == 0 {
			slot = slot.Add(time.Minute)
			clock.Set(slot)
		}
		res, err := rt.Fire(context.Background(), id, slot, TriggerScheduled)
		if err != nil || res.Status != FireAccepted {
			b.Fatalf("fire %s: %+v %v", id, res, err)
		}
	}
	b.StopTimer()
	if fi, err := os.Stat(rt.Store().Path()); err == nil {
		b.ReportMetric(float64(fi.Size()), "store-bytes")
	}
	close(g.all)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := rt.Close(ctx); err != nil {
		b.Fatal(err)
	}
	close(g.started) // every run has ended: stop the drain
}
