package e2e

import (
	"fmt"
	"testing"
	"time"
)

// TestFlexibleWindowThroughTheAgent: a job added with `chronos jobs add
// --flex` is provisioned with its window (NAS lists flex_seconds), NAS
// delivers its fire inside the window rather than at fire_at, and the
// agent runs it as that slot, on schedule, once.
func TestFlexibleWindowThroughTheAgent(t *testing.T) {
	t.Parallel()
	s := newSystem(t, systemOptions{})
	job := s.addJob("flexible", "in 8s", "--flex", "20s")
	a := s.armed(job)
	if a.FlexSeconds != 20 {
		t.Fatalf("NAS lists the fire with flex_seconds %d, want 20", a.FlexSeconds)
	}
	slot := a.FireAt.Time
	var ran []*run
	eventually(t, 60*time.Second, "the job to run once in its window", func() (bool, string) {
		ran = ran[:0]
		for at, rs := range s.runsOf(job) {
			for _, r := range rs {
				if r.state == "succeeded" && at.Equal(slot) {
					ran = append(ran, r)
				}
			}
		}
		return len(ran) == 1, fmt.Sprintf("%d runs of slot %s", len(ran), slot)
	})
	if ran[0].trigger != "scheduled" {
		t.Fatalf("the run's trigger is %q, want scheduled", ran[0].trigger)
	}
	var started time.Time
	for _, l := range readLedger(t, s.home) {
		if l.RunID == ran[0].id && l.State == "running" {
			started = l.Time
		}
	}
	// The first agent of a store has phase 1/2: its fire is spread to the
	// middle of the window (less the slack kept at its end), not fire_at.
	if late := started.Sub(slot); late < time.Second || late > 20*time.Second {
		t.Fatalf("the run started %s after its slot; want inside the 20s window and spread into it", late)
	}
	if rs := s.runsOf(job); len(rs) != 1 {
		t.Fatalf("the job ran on %d slots, want 1", len(rs))
	}
}
