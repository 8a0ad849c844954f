package agent

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/internal/runs"
	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/store"
)

// finishAll releases started runs until want runs have ended successfully.
func (b *bundle) drainRuns(t *testing.T, n int) []string {
	t.Helper()
	var ids []string
	for range n {
		id := b.started(t)
		ids = append(ids, id)
		b.gate.finish(id, nil)
		b.wait(t, id)
	}
	return ids
}

func TestMisfirePolicies(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		misfire string
		wake    time.Duration // clock after creation at t0; the job fires hourly
		// want: final states by slot offset in hours
		want        map[int]ledger.State
		wantTrigger string
		reason      string
	}{
		{"run_once", "run_once", 5*time.Hour + 45*time.Minute,
			map[int]ledger.State{1: "missed", 2: "missed", 3: "missed", 4: "missed", 5: "succeeded"}, "catch_up", "misfire run_once"},
		{"skip", "skip", 5*time.Hour + 45*time.Minute,
			map[int]ledger.State{1: "missed", 2: "missed", 3: "missed", 4: "missed", 5: "missed"}, "", "misfire skip"},
		{"skip within grace runs late", "skip", time.Hour + 10*time.Minute,
			map[int]ledger.State{1: "succeeded"}, "scheduled", ""},
		{"run_all bounded", "run_all", 5*time.Hour + 45*time.Minute,
			map[int]ledger.State{1: "succeeded", 2: "succeeded", 3: "succeeded", 4: "missed", 5: "missed"}, "catch_up", "beyond the catch-up bound of 3"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, func(c *Config) { c.MaxCatchUp = 3 })
			b.add(t, JobSpec{ID: "h", Schedule: "every 1h", Misfire: tc.misfire})
			b.clock.Set(t0.Add(tc.wake))
			if err := b.rt.CatchUp(t.Context()); err != nil {
				t.Fatal(err)
			}
			wantRuns := 0
			for _, s := range tc.want {
				if s == ledger.StateSucceeded {
					wantRuns++
				}
			}
			b.drainRuns(t, wantRuns)
			got := map[int]ledger.State{}
			reasons := ""
			for _, r := range b.runs(t, "h") {
				got[int(r.Slot.Sub(t0)/time.Hour)] = r.State
				reasons += r.Reason + "\n"
				if r.State == ledger.StateSucceeded && r.Trigger != tc.wantTrigger {
					t.Errorf("slot %s trigger %s, want %s", r.Slot, r.Trigger, tc.wantTrigger)
				}
				if r.State == ledger.StateMissed && r.Reason == "" {
					t.Errorf("missed slot %s has no reason", r.Slot)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("slots %v, want %v", got, tc.want)
			}
			if !strings.Contains(reasons, tc.reason) {
				t.Fatalf("reasons %q lack %q", reasons, tc.reason)
			}
			j := b.job(t, "h")
			if j.NextRunAt == nil || !j.NextRunAt.After(b.clock.Now()) {
				t.Fatalf("next_run_at %v not in the future", j.NextRunAt)
			}
		})
	}
}

// TestMisfireSkipReasons pins the reason of each slot skip records: an
// earlier slot still within the grace is superseded by the latest one (which
// runs), not "beyond the grace".
func TestMisfireSkipReasons(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.add(t, JobSpec{ID: "m", Schedule: "every 1m", Misfire: "skip"}) // grace 2m
	b.clock.Set(t0.Add(2*time.Minute + 30*time.Second))
	if err := b.rt.CatchUp(t.Context()); err != nil {
		t.Fatal(err)
	}
	b.drainRuns(t, 1)
	want := map[time.Duration]string{
		time.Minute:     "misfire skip: overdue by 1m30s; superseded by slot " + t0.Add(2*time.Minute).Format(time.RFC3339),
		2 * time.Minute: "",
	}
	runs := b.runs(t, "m")
	if len(runs) != len(want) {
		t.Fatalf("runs %+v, want %d", runs, len(want))
	}
	for _, r := range runs {
		reason, ok := want[r.Slot.Sub(t0)]
		if !ok || r.Reason != reason {
			t.Errorf("slot %s: %s %q, want reason %q", r.Slot, r.State, r.Reason, reason)
		}
	}
}

func TestGraceDefaults(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tests := []struct {
		schedule string
		want     time.Duration
	}{
		{"every 1m", 2 * time.Minute},
		{"every 1h", 30 * time.Minute},
		{"@daily", 2 * time.Hour},
	}
	for _, tc := range tests {
		j, s, err := b.rt.ValidateJob(JobSpec{Schedule: tc.schedule, Payload: payloadKind("gate")})
		if err != nil {
			t.Fatal(err)
		}
		if got := job.Grace(&j, s); got != tc.want {
			t.Errorf("%s: grace %s, want %s", tc.schedule, got, tc.want)
		}
	}
}

func TestOverlapPolicies(t *testing.T) {
	t.Parallel()
	tests := []struct {
		overlap string
		// final states of the runs for slots 1, 2, 3 (minutes)
		want   map[int]ledger.State
		reason string
	}{
		{"skip", map[int]ledger.State{1: "succeeded", 2: "skipped", 3: "skipped"}, "overlap skip: run"},
		{"queue_one", map[int]ledger.State{1: "succeeded", 2: "skipped", 3: "succeeded"}, "superseded by run"},
		{"allow", map[int]ledger.State{1: "succeeded", 2: "succeeded", 3: "succeeded"}, ""},
		{"replace", map[int]ledger.State{1: "interrupted", 2: "interrupted", 3: "succeeded"}, "overlap replace: replaced by run"},
	}
	for _, tc := range tests {
		t.Run(tc.overlap, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.add(t, JobSpec{ID: "o", Schedule: "every 1m", Overlap: tc.overlap})
			first := ""
			for i := 1; i <= 3; i++ {
				slot := t0.Add(time.Duration(i) * time.Minute)
				b.clock.Set(slot)
				res := b.fire(t, "o", slot)
				if res.Status != FireAccepted {
					t.Fatalf("slot %d: %+v", i, res)
				}
				if i == 1 {
					first = b.started(t)
				}
			}
			// Release what runs until every run has ended.
			b.gate.finish(first, nil)
			deadline := time.After(10 * time.Second)
			for {
				done := true
				for _, r := range b.runs(t, "o") {
					if !r.State.Terminal() {
						done = false
					}
				}
				if done && b.rt.InFlight() == 0 {
					break
				}
				select {
				case id := <-b.gate.started:
					b.gate.finish(id, nil)
				case <-deadline:
					t.Fatalf("runs did not end: %+v", b.runs(t, "o"))
				case <-time.After(20 * time.Millisecond):
				}
			}
			got := map[int]ledger.State{}
			reasons := ""
			for _, r := range b.runs(t, "o") {
				got[int(r.Slot.Sub(t0)/time.Minute)] = r.State
				reasons += r.Reason + "\n"
				if (r.State == ledger.StateSkipped || r.State == ledger.StateInterrupted) && r.Reason == "" {
					t.Errorf("run %s %s without a reason", r.RunID, r.State)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("slots %v, want %v\n%s", got, tc.want, reasons)
			}
			if !strings.Contains(reasons, tc.reason) {
				t.Fatalf("reasons %q lack %q", reasons, tc.reason)
			}
		})
	}
}

func TestIdempotencyWindow(t *testing.T) {
	t.Parallel()
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		window   string
		tz       string
		first    time.Time
		second   time.Time
		force    bool
		skipped  bool
		inReason string
	}{
		{"none runs twice", "none", "", t0, t0.Add(time.Minute), false, false, ""},
		{"hourly blocks same hour", "hourly", "", t0, t0.Add(59 * time.Minute), false, true, "window hourly 2026-06-01T09"},
		{"hourly allows next hour", "hourly", "", t0, t0.Add(time.Hour), false, false, ""},
		{"daily blocks same day", "daily", "", t0, t0.Add(10 * time.Hour), false, true, "window daily 2026-06-01"},
		{"daily forced runs", "daily", "", t0, t0.Add(10 * time.Hour), true, false, ""},
		{"daily in the job's zone", "daily", "America/New_York",
			time.Date(2026, 5, 31, 23, 0, 0, 0, ny), time.Date(2026, 6, 1, 1, 0, 0, 0, ny), false, false, ""},
		{"daily in the job's zone blocks", "daily", "America/New_York",
			time.Date(2026, 6, 1, 0, 30, 0, 0, ny), time.Date(2026, 6, 1, 23, 0, 0, 0, ny), false, true, "2026-06-01"},
		{"weekly blocks same ISO week", "weekly", "", t0, t0.Add(6 * 24 * time.Hour), false, true, "window weekly 2026-W23"},
		{"weekly allows next week", "weekly", "", t0, t0.Add(7 * 24 * time.Hour), false, false, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.clock.Set(tc.first.Add(-time.Hour))
			b.add(t, JobSpec{ID: "w", Schedule: "@yearly", Window: tc.window, Timezone: tc.tz})
			b.clock.Set(tc.first)
			r1, err := b.rt.RunNow(t.Context(), "w", RunOptions{})
			if err != nil || r1.Status != FireAccepted || r1.Skipped {
				t.Fatalf("first run: %+v %v", r1, err)
			}
			b.drainRuns(t, 1)
			b.clock.Set(tc.second)
			r2, err := b.rt.RunNow(t.Context(), "w", RunOptions{Force: tc.force})
			if err != nil {
				t.Fatal(err)
			}
			if r2.Skipped != tc.skipped {
				t.Fatalf("second run skipped=%v (%s), want %v", r2.Skipped, r2.Reason, tc.skipped)
			}
			if !tc.skipped {
				b.drainRuns(t, 1)
			}
			run := b.wait(t, r2.RunID)
			want := ledger.StateSucceeded
			if tc.skipped {
				want = ledger.StateSkipped
			}
			if run.State != want || !strings.Contains(run.Reason, tc.inReason) || run.Trigger != "manual" || run.Forced != tc.force {
				t.Fatalf("second run %+v, want %s with %q", run, want, tc.inReason)
			}
		})
	}
}

// deadPID returns the pid of a process that has exited.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

// plantClaim writes a claim for the job's next slot as if another process
// held it, advancing next_run_at as a real claim would.
func (b *bundle) plantClaim(t *testing.T, id, owner string, leaseUntil time.Time) job.Claim {
	t.Helper()
	var c job.Claim
	err := b.rt.Store().Update(t.Context(), func(st *store.State) error {
		j := st.Job(id)
		slot := *j.NextRunAt
		c = j.AddClaim(job.Claim{RunID: "planted", Slot: slot, Trigger: "scheduled", Attempt: 1, Owner: owner, LeaseUntil: leaseUntil, ClaimedAt: slot})
		next := slot.Add(time.Hour)
		j.NextRunAt = &next
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestOnInterruptPolicies(t *testing.T) {
	t.Parallel()
	host := runs.Hostname()
	tests := []struct {
		name       string
		policy     string
		owner      func(t *testing.T) string
		lease      time.Duration // lease end relative to the slot
		wantState  ledger.State
		wantStates []ledger.State
		reason     string
	}{
		{"record, owner gone", "record", func(t *testing.T) string { return fmt.Sprintf("%s:%d:x", host, deadPID(t)) },
			time.Hour, "interrupted", []ledger.State{"interrupted"}, "is gone"},
		{"record, lease expired elsewhere", "record", func(*testing.T) string { return "elsewhere:1:x" },
			time.Minute, "interrupted", []ledger.State{"interrupted"}, "lease of owner elsewhere:1:x expired"},
		{"retry, owner gone", "retry", func(t *testing.T) string { return fmt.Sprintf("%s:%d:x", host, deadPID(t)) },
			time.Hour, "succeeded", []ledger.State{"interrupted", "claimed", "running", "succeeded"}, "retry 2/3 now"},
		{"retry, lease expired elsewhere", "retry", func(*testing.T) string { return "elsewhere:1:x" },
			time.Minute, "succeeded", []ledger.State{"interrupted", "claimed", "running", "succeeded"}, "retry 2/3 in 10s"},
		{"record, same pid earlier life", "record", func(*testing.T) string { return fmt.Sprintf("%s:%d:old", host, os.Getpid()) },
			time.Hour, "interrupted", []ledger.State{"interrupted"}, "is gone"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.add(t, JobSpec{ID: "i", Schedule: "every 1h", OnInterrupt: tc.policy})
			slot := t0.Add(time.Hour)
			b.plantClaim(t, "i", tc.owner(t), slot.Add(tc.lease))
			b.clock.Set(slot.Add(5 * time.Minute))
			if err := b.rt.CatchUp(t.Context()); err != nil {
				t.Fatal(err)
			}
			if tc.policy == "retry" {
				j := b.job(t, "i")
				if strings.HasSuffix(tc.reason, "now") {
					// A dead owner's run is retried at once.
					if len(j.Pending) != 0 || len(j.Claims) != 1 || j.Claims[0].Attempt != 2 {
						t.Fatalf("pending %+v claims %+v, want attempt 2 claimed at once", j.Pending, j.Claims)
					}
				} else {
					// Only the lease expired: the retry waits out its backoff.
					if len(j.Pending) != 1 || j.Pending[0].Attempt != 2 {
						t.Fatalf("pending %+v, want one retry at attempt 2", j.Pending)
					}
					b.clock.Add(10 * time.Second)
					if err := b.rt.CatchUp(t.Context()); err != nil {
						t.Fatal(err)
					}
				}
				b.drainRuns(t, 1)
				if j := b.job(t, "i"); j.Fence != 2 {
					t.Fatalf("retry fence %d, want a new token 2", j.Fence)
				}
			}
			runs := b.runs(t, "i")
			if len(runs) != 1 {
				t.Fatalf("runs %+v, want one run of the slot", runs)
			}
			r := runs[0]
			if r.State != tc.wantState || !equalStates(r.States, tc.wantStates) || !strings.Contains(r.Reason+"|"+lineReasons(t, b, "planted"), tc.reason) {
				t.Fatalf("run %+v, want %s %v with %q", r, tc.wantState, tc.wantStates, tc.reason)
			}
			if tc.policy == "record" {
				// No second run of the slot, even on later sweeps.
				b.clock.Add(10 * time.Minute)
				if err := b.rt.CatchUp(t.Context()); err != nil {
					t.Fatal(err)
				}
				if n := len(b.runs(t, "i")); n != 1 || b.rt.InFlight() != 0 {
					t.Fatalf("slot ran again under record: %d runs", n)
				}
			}
		})
	}
}

func lineReasons(t *testing.T, b *bundle, runID string) string {
	es, err := b.rt.Ledger().Entries(t.Context(), ledger.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	var s []string
	for _, e := range es {
		if e.RunID == runID {
			s = append(s, e.Reason)
		}
	}
	return strings.Join(s, "|")
}

func TestLostLeaseCompletionIsDiscarded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.add(t, JobSpec{ID: "l", Schedule: "every 1h"})
	slot := t0.Add(time.Hour)
	b.clock.Set(slot)
	res := b.fire(t, "l", slot)
	id := b.started(t)
	// Another agent on another host sharing the home sees the lease lapse.
	other, err := Open(t.Context(), Config{Home: b.home, Now: b.clock.Now, Host: "other-host", Retention: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(context.Background())
	b.clock.Add(2 * time.Minute)
	if err := other.CatchUp(t.Context()); err != nil {
		t.Fatal(err)
	}
	b.gate.finish(id, nil)
	if done := b.rt.runs.Done(id); done != nil {
		<-done
	}
	var last ledger.Entry
	es, _ := b.rt.Ledger().Entries(t.Context(), ledger.Filter{JobID: "l"})
	for _, e := range es {
		if e.RunID == res.RunID {
			last = e
		}
	}
	if !last.Discarded || last.State != ledger.StateSucceeded || !strings.Contains(last.Reason, "completion discarded") {
		t.Fatalf("last line %+v, want a discarded completion", last)
	}
	r := b.wait(t, res.RunID)
	if r.State != ledger.StateInterrupted {
		t.Fatalf("folded run %s, want interrupted", r.State)
	}
	if j := b.job(t, "l"); j.LastStatus != job.StatusInterrupted || len(j.Claims) != 0 {
		t.Fatalf("job %+v: the stale completion must not update it", j)
	}
}

func TestRecordMissedIsIdempotent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.add(t, JobSpec{ID: "m", Schedule: "every 1h"})
	slot := t0.Add(time.Hour)
	b.clock.Set(slot.Add(time.Minute))
	for i := range 3 {
		wrote, err := b.rt.RecordMissed(t.Context(), "m", slot, "dead-lettered after 8 attempts")
		if err != nil {
			t.Fatal(err)
		}
		if wrote != (i == 0) {
			t.Fatalf("call %d wrote %v", i, wrote)
		}
	}
	runs := b.runs(t, "m")
	if len(runs) != 1 || runs[0].State != ledger.StateMissed || !strings.Contains(runs[0].Reason, "dead-lettered") {
		t.Fatalf("runs %+v, want one missed", runs)
	}
	if j := b.job(t, "m"); !j.NextRunAt.Equal(slot.Add(time.Hour)) {
		t.Fatalf("next_run_at %v, want past the missed slot", j.NextRunAt)
	}
}

// TestRecordMissedLeavesLaterOverdueSlotsToMisfire: when NAS reports a
// dead-lettered slot and later slots have passed too, those later slots go to
// the misfire policy instead of being skipped without a ledger line.
func TestRecordMissedLeavesLaterOverdueSlotsToMisfire(t *testing.T) {
	t.Parallel()
	tests := []struct {
		misfire string
		want    map[int]ledger.State // by slot offset in hours
	}{
		{"skip", map[int]ledger.State{1: "missed", 2: "missed", 3: "missed", 4: "missed"}},
		{"run_once", map[int]ledger.State{1: "missed", 2: "missed", 3: "missed", 4: "succeeded"}},
		{"run_all", map[int]ledger.State{1: "missed", 2: "succeeded", 3: "succeeded", 4: "succeeded"}},
	}
	for _, tc := range tests {
		t.Run(tc.misfire, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.add(t, JobSpec{ID: "d", Schedule: "every 1h", Misfire: tc.misfire})
			b.clock.Set(t0.Add(4*time.Hour + 45*time.Minute))
			if _, err := b.rt.RecordMissed(t.Context(), "d", t0.Add(time.Hour), "NAS gave up after 10 attempts"); err != nil {
				t.Fatal(err)
			}
			wantRuns := 0
			for _, st := range tc.want {
				if st == ledger.StateSucceeded {
					wantRuns++
				}
			}
			b.drainRuns(t, wantRuns)
			got := map[int]ledger.State{}
			for _, r := range b.runs(t, "d") {
				got[int(r.Slot.Sub(t0)/time.Hour)] = r.State
				if r.State == ledger.StateMissed && r.Reason == "" {
					t.Errorf("missed slot %s has no reason", r.Slot)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("slots %v, want %v", got, tc.want)
			}
			if j := b.job(t, "d"); j.NextRunAt == nil || !j.NextRunAt.After(b.clock.Now()) {
				t.Fatalf("next_run_at %v not in the future", j.NextRunAt)
			}
		})
	}
}

// TestRecordMissedAfterCatchUpAddsNothing: a slot the misfire policy already
// decided is not recorded a second time when NAS reports its fire failed.
func TestRecordMissedAfterCatchUpAddsNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.add(t, JobSpec{ID: "c", Schedule: "every 1h", Misfire: "run_all"})
	b.clock.Set(t0.Add(2*time.Hour + 45*time.Minute))
	if err := b.rt.CatchUp(t.Context()); err != nil {
		t.Fatal(err)
	}
	b.drainRuns(t, 2)
	if wrote, err := b.rt.RecordMissed(t.Context(), "c", t0.Add(time.Hour), "NAS gave up"); err != nil || wrote {
		t.Fatalf("record missed wrote %v, %v; want nothing written", wrote, err)
	}
	perSlot := map[int]int{}
	for _, r := range b.runs(t, "c") {
		perSlot[int(r.Slot.Sub(t0)/time.Hour)]++
		if r.State != ledger.StateSucceeded {
			t.Errorf("slot %s %s (%s), want succeeded", r.Slot, r.State, r.Reason)
		}
	}
	if perSlot[1] != 1 || perSlot[2] != 1 || len(perSlot) != 2 {
		t.Fatalf("runs per slot %v, want one each for slots 1 and 2", perSlot)
	}
}

// TestRetryWakesThroughDesired: a retry waiting out its backoff is listed by
// Desired at its wake time, so a stopped agent is called back for it, and a
// fire at that time runs it.
func TestRetryWakesThroughDesired(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.add(t, JobSpec{ID: "w", Schedule: "every 1h", OnInterrupt: "retry", Retry: job.Retry{Backoff: job.Duration(30 * time.Second)}})
	slot := t0.Add(time.Hour)
	b.plantClaim(t, "w", "elsewhere:1:x", slot.Add(time.Minute))
	b.clock.Set(slot.Add(2 * time.Minute))
	if err := b.rt.CatchUp(t.Context()); err != nil {
		t.Fatal(err)
	}
	wake := slot.Add(2*time.Minute + 30*time.Second)
	d, err := b.rt.Desired(t.Context())
	if err != nil || len(d) != 1 || !d[0].FireAt.Equal(wake) {
		t.Fatalf("desired %v %v, want the retry's wake at %s", d, err, wake)
	}
	b.clock.Set(wake)
	res := b.fire(t, "w", wake)
	if res.Status != FireAccepted || res.RunID != "planted" || res.Queued {
		t.Fatalf("wake fire %+v", res)
	}
	b.drainRuns(t, 1)
	r := b.wait(t, "planted")
	if r.State != ledger.StateSucceeded || r.Token != 2 || r.Attempt != 2 {
		t.Fatalf("retried run %+v", r)
	}
	if d, _ := b.rt.Desired(t.Context()); len(d) != 1 || !d[0].FireAt.Equal(slot.Add(time.Hour)) {
		t.Fatalf("desired after the retry %v, want the next slot", d)
	}
}
