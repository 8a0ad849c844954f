package agent

import (
	"fmt"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/ledger"
)

// TestLateFireAppliesMisfireToEveryOverdueSlot delivers the fire of a job's
// oldest overdue slot after later slots have passed too (NAS retried it
// while the agent was down). Every overdue slot must end with a ledger line
// decided by the job's misfire policy, as at a wake; none is skipped
// unrecorded.
func TestLateFireAppliesMisfireToEveryOverdueSlot(t *testing.T) {
	t.Parallel()
	wake := 5*time.Hour + 45*time.Minute // slots 1..5 overdue; the job fires hourly
	tests := []struct {
		misfire  string
		want     map[int]ledger.State
		skipped  bool // the answer for slot 1
		wantRuns int
	}{
		{"run_once", map[int]ledger.State{1: "missed", 2: "missed", 3: "missed", 4: "missed", 5: "succeeded"}, true, 1},
		{"skip", map[int]ledger.State{1: "missed", 2: "missed", 3: "missed", 4: "missed", 5: "missed"}, true, 0},
		{"run_all", map[int]ledger.State{1: "succeeded", 2: "succeeded", 3: "succeeded", 4: "missed", 5: "missed"}, false, 3},
	}
	for _, tc := range tests {
		t.Run(tc.misfire, func(t *testing.T) {
			t.Parallel()
			b := setup(t, func(c *Config) { c.MaxCatchUp = 3 })
			b.add(t, JobSpec{ID: "h", Schedule: "every 1h", Misfire: tc.misfire})
			b.clock.Set(t0.Add(wake))
			res, err := b.rt.Fire(t.Context(), "h", t0.Add(time.Hour), TriggerScheduled)
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != FireAccepted || res.RunID == "" || res.Skipped != tc.skipped {
				t.Fatalf("answer %+v, want accepted with a run id, skipped %v", res, tc.skipped)
			}
			b.drainRuns(t, tc.wantRuns)
			got := map[int]ledger.State{}
			ids := map[string]bool{}
			for _, r := range b.runs(t, "h") {
				got[int(r.Slot.Sub(t0)/time.Hour)] = r.State
				ids[r.RunID] = true
				if r.State == ledger.StateMissed && r.Reason == "" {
					t.Errorf("missed slot %s has no reason", r.Slot)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("slots %v, want %v", got, tc.want)
			}
			if !ids[res.RunID] {
				t.Errorf("the answer's run id %s is not in the ledger", res.RunID)
			}
			j := b.job(t, "h")
			if j.NextRunAt == nil || !j.NextRunAt.After(b.clock.Now()) {
				t.Fatalf("next_run_at %v not in the future", j.NextRunAt)
			}
			// NAS delivers the same fire again: a duplicate, nothing new runs.
			again, err := b.rt.Fire(t.Context(), "h", t0.Add(time.Hour), TriggerScheduled)
			if err != nil || again.Status != FireDuplicate {
				t.Fatalf("second delivery: %+v %v, want duplicate", again, err)
			}
		})
	}
}
