package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/internal/lifecycle"
	"github.com/chronoscron/chronos/agent/ledger"
)

// TestPauseRecordsPassedSlots: each slot that passes while a job is paused
// is recorded skipped with reason paused, once, whoever records it (a
// sweep, the resume), and resume starts from the next slot after now.
func TestPauseRecordsPassedSlots(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.add(t, JobSpec{ID: "p", Schedule: "every 1m"})
	if _, err := b.rt.Pause(ctx, "p", ""); err != nil {
		t.Fatal(err)
	}
	b.clock.Set(t0.Add(3*time.Minute + 30*time.Second))
	if n, err := b.rt.RecordPaused(ctx); err != nil || n != 3 {
		t.Fatalf("recorded %d (%v), want the 3 passed slots", n, err)
	}
	if n, _ := b.rt.RecordPaused(ctx); n != 0 {
		t.Fatalf("recorded %d again", n)
	}
	b.clock.Set(t0.Add(4*time.Minute + 30*time.Second))
	j, err := b.rt.Resume(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	if !j.NextRunAt.Equal(t0.Add(5*time.Minute)) || j.PausedFrom != nil {
		t.Fatalf("after resume next %v paused_from %v", j.NextRunAt, j.PausedFrom)
	}
	runs := b.runs(t, "p")
	if len(runs) != 4 {
		t.Fatalf("%d runs, want 4 skipped: %+v", len(runs), runs)
	}
	for i, r := range runs {
		if r.State != ledger.StateSkipped || r.Reason != ReasonPaused || !r.Slot.Equal(t0.Add(time.Duration(i+1)*time.Minute)) {
			t.Errorf("run %d: %s %s at %s", i, r.State, r.Reason, r.Slot)
		}
	}
}

// TestPauseRecordsBounded: a long pause of a frequent job records at most
// lifecycle.MaxEnumerate lines in one go, the last saying the later slots were
// skipped too, and goes on from the first slot after now.
func TestPauseRecordsBounded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.add(t, JobSpec{ID: "f", Schedule: "every 1s"})
	if _, err := b.rt.Pause(ctx, "f", "maintenance"); err != nil {
		t.Fatal(err)
	}
	b.clock.Set(t0.Add(2 * time.Hour))
	if n, err := b.rt.RecordPaused(ctx); err != nil || n != lifecycle.MaxEnumerate {
		t.Fatalf("recorded %d (%v), want %d", n, err, lifecycle.MaxEnumerate)
	}
	runs := b.runs(t, "f")
	last := runs[len(runs)-1]
	if !strings.HasPrefix(last.Reason, "paused: maintenance") || !strings.Contains(last.Reason, "skipped too") {
		t.Fatalf("last reason %q", last.Reason)
	}
	if j := b.job(t, "f"); !j.PausedFrom.Equal(t0.Add(2*time.Hour + time.Second)) {
		t.Fatalf("paused_from %v", j.PausedFrom)
	}
}

// TestPauseDropsQueuedRun: a run queued behind a live one (overlap
// queue_one) does not stay claimed when its job is paused: it is recorded
// skipped with reason paused and is no longer owed.
func TestPauseDropsQueuedRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.add(t, JobSpec{ID: "q", Schedule: "every 1m", Overlap: "queue_one"})
	b.clock.Set(t0.Add(time.Minute))
	b.fire(t, "q", t0.Add(time.Minute))
	first := b.started(t)
	b.clock.Set(t0.Add(2 * time.Minute))
	res := b.fire(t, "q", t0.Add(2*time.Minute))
	if !res.Queued {
		t.Fatalf("second slot not queued: %+v", res)
	}
	j, err := b.rt.Pause(ctx, "q", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(j.Pending) != 0 {
		t.Fatalf("paused job still owes %+v", j.Pending)
	}
	b.gate.finish(first, nil)
	b.wait(t, first)
	found := false
	for _, r := range b.runs(t, "q") {
		if r.RunID == res.RunID {
			found = true
			if r.State != ledger.StateSkipped || r.Reason != ReasonPaused {
				t.Fatalf("queued run %s %s %q, want skipped paused", r.RunID, r.State, r.Reason)
			}
		}
	}
	if !found {
		t.Fatalf("queued run %s not in the ledger", res.RunID)
	}
}

// TestReadRuns: reading the ledger of a home no Runtime keeps open first
// records the slots passed while its jobs are paused; a home with no jobs
// and no runs reads as an empty list, not nil.
func TestReadRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	empty, err := ReadRuns(ctx, Config{Home: t.TempDir()}, ledger.Filter{})
	if err != nil || empty == nil || len(empty) != 0 {
		t.Fatalf("ReadRuns of an empty home = %v, %v; want an empty list", empty, err)
	}

	home := t.TempDir()
	rt, err := Open(ctx, Config{Home: home, Now: func() time.Time { return t0 }, Retention: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := rt.AddJob(ctx, JobSpec{ID: "p", Schedule: "every 1m", Payload: shell("true")}); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Pause(ctx, "p", ""); err != nil {
		t.Fatal(err)
	}
	if err := rt.Close(ctx); err != nil {
		t.Fatal(err)
	}
	later := Config{Home: home, Now: func() time.Time { return t0.Add(3*time.Minute + 30*time.Second) }}
	runs, err := ReadRuns(ctx, later, ledger.Filter{JobID: "p"})
	if err != nil || len(runs) != 3 {
		t.Fatalf("ReadRuns = %d runs (%v), want the 3 slots passed while paused: %+v", len(runs), err, runs)
	}
	for i, r := range runs {
		if r.State != ledger.StateSkipped || r.Reason != ReasonPaused || !r.Slot.Equal(t0.Add(time.Duration(i+1)*time.Minute)) {
			t.Errorf("run %d: %s %s at %s", i, r.State, r.Reason, r.Slot)
		}
	}
	if newest, err := ReadRuns(ctx, later, ledger.Filter{Limit: 1}); err != nil || len(newest) != 1 || !newest[0].Slot.Equal(t0.Add(3*time.Minute)) {
		t.Fatalf("ReadRuns with limit 1 = %+v, %v; want the newest run, recorded once", newest, err)
	}
}

// TestManualRunOfAPausedJob: a paused job still runs by hand (how an
// operator tries it before resuming), and stays paused with its reason.
func TestManualRunOfAPausedJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.add(t, JobSpec{ID: "p", Schedule: "@daily", Payload: shell("echo tried")})
	if _, err := b.rt.Pause(t.Context(), "p", "maintenance"); err != nil {
		t.Fatal(err)
	}
	run := b.runNow(t, "p")
	if run.State != ledger.StateSucceeded || run.Trigger != string(TriggerManual) {
		t.Fatalf("run %+v", run)
	}
	if j := b.job(t, "p"); j.Enabled || j.PausedReason != "maintenance" || j.NextRunAt != nil {
		t.Fatalf("job after the run: enabled %v, reason %q, next %v; want still paused", j.Enabled, j.PausedReason, j.NextRunAt)
	}
}
