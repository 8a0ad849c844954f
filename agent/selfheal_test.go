package agent

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/runner"
)

// MissSlots records each slot from the job's next_run_at up to until once,
// moves the job past them, and is a no-op once the job has moved: also when
// several processes sharing the home race for it.
func TestMissSlotsRecordsEachSlotOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.add(t, JobSpec{ID: "a", Schedule: "every 1h"})
	second, err := Open(context.Background(), Config{Home: b.home, Now: b.clock.Now, Runners: map[string]runner.Runner{"gate": b.gate}, Retention: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = second.Close(context.Background()) }()
	b.clock.Set(t0.Add(4*time.Hour + 30*time.Minute))
	var wg sync.WaitGroup
	counts := make([]int, 6)
	for i := range counts {
		rt := b.rt
		if i%2 == 1 {
			rt = second
		}
		wg.Go(func() {
			n, err := rt.MissSlots(context.Background(), "a", t0.Add(time.Hour), t0.Add(3*time.Hour), "no fire arrived: test")
			if err != nil {
				t.Errorf("miss slots: %v", err)
			}
			counts[i] = n
		})
	}
	wg.Wait()
	total := 0
	for _, n := range counts {
		total += n
	}
	if total != 3 {
		t.Fatalf("recorded %v (%d in all), want 3 slots once", counts, total)
	}
	runs := b.runs(t, "a")
	var got []string
	for _, r := range runs {
		got = append(got, fmt.Sprintf("%s:%s", r.Slot.Sub(t0), r.State))
		if r.Reason != "no fire arrived: test" {
			t.Errorf("reason %q", r.Reason)
		}
	}
	if strings.Join(got, " ") != "1h0m0s:missed 2h0m0s:missed 3h0m0s:missed" {
		t.Fatalf("ledger %v", got)
	}
	if j := b.job(t, "a"); !j.NextRunAt.Equal(t0.Add(4 * time.Hour)) {
		t.Fatalf("next_run_at %v, want the first slot after until", j.NextRunAt)
	}
	// Until is capped at now; a one-shot finishes.
	b.add(t, JobSpec{ID: "once", Schedule: "in 30m"})
	n, err := b.rt.MissSlots(context.Background(), "once", b.job(t, "once").NextRunAt.UTC(), t0.Add(100*time.Hour), "stopped")
	if err != nil || n != 0 {
		t.Fatalf("a future one-shot slot: %d, %v", n, err)
	}
	b.clock.Add(31 * time.Minute)
	if n, err = b.rt.MissSlots(context.Background(), "once", b.job(t, "once").NextRunAt.UTC(), t0.Add(100*time.Hour), "stopped"); err != nil || n != 1 {
		t.Fatalf("the one-shot's passed slot: %d, %v", n, err)
	}
	if j := b.job(t, "once"); j.NextRunAt != nil || j.FinishedAt == nil {
		t.Fatalf("one-shot after its slot was missed: %+v", j)
	}
}

// Backstop hands the overdue slots decide accepts to the misfire policy,
// prefixes every line with the cause, and leaves the rest alone.
func TestBackstopAppliesTheMisfirePolicyWithTheCause(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.add(t, JobSpec{ID: "runonce", Schedule: "every 1h"})
	b.add(t, JobSpec{ID: "skip", Schedule: "every 1h", Misfire: "skip"})
	b.add(t, JobSpec{ID: "left", Schedule: "every 1h"})
	b.clock.Set(t0.Add(3*time.Hour + 45*time.Minute)) // 1h, 2h, 3h passed; grace 30 min
	var seen []Overdue
	n, err := b.rt.Backstop(context.Background(), func(o Overdue) (string, bool) {
		seen = append(seen, o)
		return "no fire arrived (test)", o.JobID != "left"
	})
	if err != nil || n != 2 {
		t.Fatalf("backstop: %d, %v", n, err)
	}
	if len(seen) != 3 {
		t.Fatalf("decide saw %+v", seen)
	}
	for _, o := range seen {
		if !o.Slot.Equal(t0.Add(time.Hour)) || o.Late != 2*time.Hour+45*time.Minute || o.Grace != 30*time.Minute {
			t.Fatalf("overdue %+v", o)
		}
	}
	id := b.started(t)
	b.gate.finish(id, nil)
	if r := b.wait(t, id); r.State != ledger.StateSucceeded || r.Trigger != string(TriggerCatchUp) || !strings.HasPrefix(r.Reason, "no fire arrived (test)") {
		t.Fatalf("the run_once run: %+v", r)
	}
	for _, job := range []string{"runonce", "skip"} {
		for _, r := range b.runs(t, job) {
			if !strings.HasPrefix(r.Reason, "no fire arrived (test)") {
				t.Errorf("%s slot %s (%s): reason %q", job, r.Slot.Sub(t0), r.State, r.Reason)
			}
		}
	}
	if got := b.states(t, "skip"); got[ledger.StateMissed] != 3 || len(got) != 1 {
		t.Fatalf("skip: %v", got)
	}
	if got := b.states(t, "runonce"); got[ledger.StateMissed] != 2 || got[ledger.StateSucceeded] != 1 {
		t.Fatalf("run_once: %v", got)
	}
	if len(b.runs(t, "left")) != 0 || !b.job(t, "left").NextRunAt.Equal(t0.Add(time.Hour)) {
		t.Fatal("a job decide declined was touched")
	}
	// A second pass finds nothing overdue for the handled jobs.
	n, err = b.rt.Backstop(context.Background(), func(o Overdue) (string, bool) { return "again", o.JobID != "left" })
	if err != nil || n != 0 {
		t.Fatalf("second backstop: %d, %v", n, err)
	}
}

func TestBackstopAt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, ok, err := b.rt.BackstopAt(context.Background()); ok || err != nil {
		t.Fatalf("no jobs: %v %v", ok, err)
	}
	b.add(t, JobSpec{ID: "hourly", Schedule: "every 1h"})                     // t0+1h, grace 30m
	b.add(t, JobSpec{ID: "graced", Schedule: "every 2h", Grace: time.Minute}) // t0+2h, grace 1m
	b.add(t, JobSpec{ID: "paused", Schedule: "every 1m", Paused: true})
	at, ok, err := b.rt.BackstopAt(context.Background())
	if err != nil || !ok || !at.Equal(t0.Add(90*time.Minute)) {
		t.Fatalf("backstop at %v (%v, %v), want t0+1h30m", at, ok, err)
	}
}
