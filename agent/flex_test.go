package agent

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/ledger"
)

// TestFlexValidation: a job's flexible window is 0 or whole seconds up to a
// day, shorter than its schedule's period; anything else is an invalid job
// and nothing is saved.
func TestFlexValidation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		schedule string
		flex     time.Duration
		want     string // "" valid, else part of the error
	}{
		{"none", "every 1h", 0, ""},
		{"minutes", "every 1h", 10 * time.Minute, ""},
		{"one day on a one-shot", "in 2h", 24 * time.Hour, ""},
		{"one day on a two-day interval", "every 48h", 24 * time.Hour, ""},
		{"negative", "every 1h", -time.Second, "must not be negative"},
		{"over a day", "in 2h", 24*time.Hour + time.Second, "longer than the most of 24h0m0s"},
		{"fraction of a second", "every 1h", 1500 * time.Millisecond, "whole seconds"},
		{"the whole period", "every 10m", 10 * time.Minute, "shorter than the schedule's period of 10m0s"},
		{"beyond a cron period", "*/5 * * * *", 6 * time.Minute, "shorter than the schedule's period of 5m0s"},
	}
	b := setup(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id := strings.ReplaceAll(tc.name, " ", "-")
			j, _, err := b.rt.AddJob(t.Context(), JobSpec{ID: id, Schedule: tc.schedule, Flex: tc.flex, Payload: payloadKind("gate")})
			if tc.want == "" {
				if err != nil || j.Flex.Std() != tc.flex {
					t.Fatalf("add: %v, flex %s, want %s", err, j.Flex.Std(), tc.flex)
				}
				return
			}
			if !errors.Is(err, ErrInvalidJob) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("add: %v, want an invalid job saying %q", err, tc.want)
			}
			if _, err := b.rt.Job(t.Context(), id); err == nil {
				t.Fatal("the invalid job was saved")
			}
		})
	}
}

// TestFlexEdit: jobs edit sets and removes a window, refuses a bad one
// without changing the job, and keeps next_run_at (the slot is the same).
func TestFlexEdit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	before := b.add(t, JobSpec{ID: "e", Schedule: "every 1h"})
	ten, zero, bad := 10*time.Minute, time.Duration(0), 2*time.Hour
	j, _, err := b.rt.EditJob(t.Context(), "e", JobPatch{Flex: &ten})
	if err != nil || j.Flex.Std() != ten || !j.NextRunAt.Equal(*before.NextRunAt) {
		t.Fatalf("edit: %v, flex %s, next %v (was %v)", err, j.Flex.Std(), j.NextRunAt, before.NextRunAt)
	}
	if _, _, err := b.rt.EditJob(t.Context(), "e", JobPatch{Flex: &bad}); !errors.Is(err, ErrInvalidJob) {
		t.Fatalf("edit to a window as long as the period: %v", err)
	}
	if got := b.job(t, "e"); got.Flex.Std() != ten {
		t.Fatalf("a refused edit changed flex to %s", got.Flex.Std())
	}
	d, err := b.rt.Desired(t.Context())
	if err != nil || len(d) != 1 || d[0].Flex != ten || !d[0].FireAt.Equal(*before.NextRunAt) {
		t.Fatalf("desired %+v %v, want the slot with its window", d, err)
	}
	// A schedule edit whose period the window reaches is refused too.
	sched := "every 5m"
	if _, _, err := b.rt.EditJob(t.Context(), "e", JobPatch{Schedule: &sched}); !errors.Is(err, ErrInvalidJob) || !strings.Contains(err.Error(), "flex") {
		t.Fatalf("schedule edit under the window: %v", err)
	}
	if j, _, err = b.rt.EditJob(t.Context(), "e", JobPatch{Flex: &zero}); err != nil || j.Flex != 0 {
		t.Fatalf("removing the window: %v, flex %s", err, j.Flex.Std())
	}
	if d, _ := b.rt.Desired(t.Context()); len(d) != 1 || d[0].Flex != 0 {
		t.Fatalf("desired after removing the window %+v", d)
	}
}

// TestFlexFireRunsAsItsSlot: NAS spreads the fire of a job with a flexible
// window inside [slot, slot+flex] and the body carries the nominal slot. A
// fire delivered anywhere up to flex late runs as that slot, with trigger
// scheduled, under every misfire policy; misfire skip's grace counts from
// the window's end. The same lateness without a window is a miss.
func TestFlexFireRunsAsItsSlot(t *testing.T) {
	t.Parallel()
	slot := t0.Add(time.Hour)
	tests := []struct {
		name    string
		misfire string
		flex    time.Duration
		late    time.Duration
		missed  bool
	}{
		{"skip, at the slot", "skip", 20 * time.Minute, 0, false},
		{"skip, inside the window", "skip", 20 * time.Minute, 19 * time.Minute, false},
		{"skip, at the window's end", "skip", 20 * time.Minute, 20 * time.Minute, false},
		{"skip, within the grace after the window", "skip", 20 * time.Minute, 20*time.Minute + 50*time.Second, false},
		{"skip, beyond the grace after the window", "skip", 20 * time.Minute, 21*time.Minute + time.Second, true},
		{"skip, no window", "skip", 0, 19 * time.Minute, true},
		{"run_once, at the window's end", "run_once", 20 * time.Minute, 20 * time.Minute, false},
		{"run_all, at the window's end", "run_all", 20 * time.Minute, 20 * time.Minute, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.add(t, JobSpec{ID: "f", Schedule: "every 1h", Misfire: tc.misfire, Grace: time.Minute, Flex: tc.flex})
			b.clock.Set(slot.Add(tc.late))
			res := b.fire(t, "f", slot)
			if res.Status != FireAccepted || res.Skipped != tc.missed {
				t.Fatalf("fire %s late: %+v, want accepted, skipped %v", tc.late, res, tc.missed)
			}
			if !tc.missed {
				b.drainRuns(t, 1)
			}
			runs := b.runs(t, "f")
			if len(runs) != 1 || !runs[0].Slot.Equal(slot) || runs[0].RunID != res.RunID {
				t.Fatalf("runs %+v, want one for slot %s", runs, slot)
			}
			r := runs[0]
			switch {
			case tc.missed && r.State != ledger.StateMissed:
				t.Fatalf("state %s, want missed", r.State)
			case tc.missed && tc.flex > 0 && !strings.Contains(r.Reason, "after the flexible window of 20m0s"):
				t.Fatalf("reason %q does not name the window", r.Reason)
			case !tc.missed && (r.State != ledger.StateSucceeded || r.Trigger != string(TriggerScheduled)):
				t.Fatalf("run %s trigger %s, want succeeded, scheduled", r.State, r.Trigger)
			}
			if j := b.job(t, "f"); j.NextRunAt == nil || !j.NextRunAt.Equal(slot.Add(time.Hour)) {
				t.Fatalf("next_run_at %v, want the next slot", j.NextRunAt)
			}
			// The same fire again (NAS retried it) is a duplicate.
			if again := b.fire(t, "f", slot); again.Status != FireDuplicate {
				t.Fatalf("second delivery %+v, want duplicate", again)
			}
		})
	}
}

// TestFlexCatchUpAndBackstop: a wake inside a slot's window finds it on
// time (it runs as scheduled, even under misfire skip), and the backstop
// waits for the window's end plus the grace before it takes a slot over.
func TestFlexCatchUpAndBackstop(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.add(t, JobSpec{ID: "f", Schedule: "every 1h", Misfire: "skip", Grace: time.Minute, Flex: 20 * time.Minute})
	slot := t0.Add(time.Hour)
	at, ok, err := b.rt.BackstopAt(t.Context())
	if err != nil || !ok || !at.Equal(slot.Add(21*time.Minute)) {
		t.Fatalf("backstop at %v %v %v, want the window's end plus the grace, %v", at, ok, err, slot.Add(21*time.Minute))
	}
	b.clock.Set(slot.Add(15 * time.Minute))
	var seen Overdue
	if _, err := b.rt.Backstop(t.Context(), func(o Overdue) (string, bool) { seen = o; return "", false }); err != nil {
		t.Fatal(err)
	}
	if seen.Late != 15*time.Minute || seen.Grace != 21*time.Minute {
		t.Fatalf("overdue %+v, want late 15m and grace 21m", seen)
	}
	if err := b.rt.CatchUp(t.Context()); err != nil {
		t.Fatal(err)
	}
	b.drainRuns(t, 1)
	runs := b.runs(t, "f")
	if len(runs) != 1 || runs[0].State != ledger.StateSucceeded || runs[0].Trigger != string(TriggerScheduled) || !runs[0].Slot.Equal(slot) {
		t.Fatalf("runs %+v, want the slot run as scheduled", runs)
	}
}
