package agent

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/runner"
)

func TestFireClaimsASlotOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.add(t, JobSpec{ID: "a", Schedule: "every 1m"})
	slot := t0.Add(time.Minute)
	if !j.NextRunAt.Equal(slot) {
		t.Fatalf("next_run_at = %v, want %v", j.NextRunAt, slot)
	}
	b.clock.Set(slot.Add(50 * time.Millisecond))
	res := b.fire(t, "a", slot)
	if res.Status != FireAccepted || res.RunID == "" {
		t.Fatalf("first fire = %+v", res)
	}
	if got := b.fire(t, "a", slot); got.Status != FireDuplicate {
		t.Fatalf("second fire = %+v, want duplicate", got)
	}
	if got := b.fire(t, "nope", slot); got.Status != FireGone {
		t.Fatalf("unknown job fire = %+v, want gone", got)
	}
	if got := b.job(t, "a"); !got.NextRunAt.Equal(slot.Add(time.Minute)) || len(got.Claims) != 1 || got.Fence != 1 {
		t.Fatalf("after claim: next %v claims %d fence %d", got.NextRunAt, len(got.Claims), got.Fence)
	}
	if id := b.started(t); id != res.RunID {
		t.Fatalf("started %s, want %s", id, res.RunID)
	}
	b.gate.finish(res.RunID, nil)
	r := b.wait(t, res.RunID)
	if r.State != ledger.StateSucceeded || r.LatenessMS != 50 || r.Trigger != "scheduled" || r.Token != 1 {
		t.Fatalf("run = %+v", r)
	}
	if want := []ledger.State{"claimed", "running", "succeeded"}; !equalStates(r.States, want) {
		t.Fatalf("states %v, want %v", r.States, want)
	}
	got := b.job(t, "a")
	if got.LastStatus != "succeeded" || len(got.Claims) != 0 || got.LastRunID != res.RunID {
		t.Fatalf("job after run: %+v", got)
	}
	if st := b.states(t, "a"); st[ledger.StateDuplicate] != 1 {
		t.Fatalf("ledger states %v: want the duplicate recorded", st)
	}
}

func equalStates(a, b []ledger.State) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestOneShotAndRepeatFinish(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		spec  JobSpec
		fires int
	}{
		{"one-shot", JobSpec{ID: "o", Schedule: "in 30s"}, 1},
		{"repeat 3", JobSpec{ID: "r", Schedule: "every 10s", Repeat: 3}, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.add(t, tc.spec)
			for i := 0; i < tc.fires; i++ {
				j := b.job(t, tc.spec.ID)
				if j.NextRunAt == nil {
					t.Fatalf("fire %d: no next_run_at", i)
				}
				b.clock.Set(*j.NextRunAt)
				res := b.fire(t, tc.spec.ID, *j.NextRunAt)
				if res.Status != FireAccepted {
					t.Fatalf("fire %d: %+v", i, res)
				}
				b.gate.finish(b.started(t), nil)
				b.wait(t, res.RunID)
			}
			j := b.job(t, tc.spec.ID)
			if j.NextRunAt != nil || j.FinishedAt == nil {
				t.Fatalf("job not finished: next %v finished %v", j.NextRunAt, j.FinishedAt)
			}
			if d, _ := b.rt.Desired(t.Context()); len(d) != 0 {
				t.Fatalf("finished job still desired: %v", d)
			}
		})
	}
}

func TestAddJobRejectsBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tests := []struct {
		name string
		spec JobSpec
		want string
	}{
		{"bad schedule", JobSpec{Schedule: "every tuesday-ish"}, "schedule"},
		{"never fires", JobSpec{Schedule: "0 0 30 2 *"}, "never"},
		{"past one-shot", JobSpec{Schedule: "2020-01-01 09:00"}, "no fire"},
		{"bad misfire", JobSpec{Schedule: "@hourly", Misfire: "sometimes"}, "misfire"},
		{"bad overlap", JobSpec{Schedule: "@hourly", Overlap: "x"}, "overlap"},
		{"bad window", JobSpec{Schedule: "@hourly", Window: "monthly"}, "window"},
		{"bad interrupt", JobSpec{Schedule: "@hourly", OnInterrupt: "panic"}, "on-interrupt"},
		{"bad zone", JobSpec{Schedule: "@hourly", Timezone: "Mars/Base"}, "zone"},
		{"zone conflicts with the prefix", JobSpec{Schedule: "CRON_TZ=Asia/Tokyo 0 9 * * *", Timezone: "Europe/Paris"}, "conflicts"},
		{"bad id", JobSpec{ID: "a b", Schedule: "@hourly"}, "job id"},
		{"dot-dot id", JobSpec{ID: "..", Schedule: "@hourly"}, "names a directory"},
		{"dot id", JobSpec{ID: ".", Schedule: "@hourly"}, "names a directory"},
		{"bad payload kind", JobSpec{Schedule: "@hourly", Payload: payloadKind("nope")}, "unknown payload kind"},
		{"negative repeat", JobSpec{Schedule: "@hourly", Repeat: -1}, "repeat"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec := tc.spec
			if spec.Payload.Kind == "" {
				spec.Payload = payloadKind("gate")
			}
			_, _, err := b.rt.AddJob(t.Context(), spec)
			if !errors.Is(err, ErrInvalidJob) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrInvalidJob mentioning %q", err, tc.want)
			}
		})
	}
	if jobs, _ := b.rt.Jobs(t.Context()); len(jobs) != 0 {
		t.Fatalf("store changed: %d jobs", len(jobs))
	}
}

// TestFireWritesClaimAndStartTogether: a fire that starts its run returns
// with the run's claimed and running lines both in the ledger (written
// together), and the run does not write its running line again.
func TestFireWritesClaimAndStartTogether(t *testing.T) {
	t.Parallel()
	g := newGate()
	rt, err := Open(t.Context(), Config{Home: t.TempDir(), Retention: -1, Runners: map[string]runner.Runner{"gate": g}})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	j, _, err := rt.AddJob(t.Context(), JobSpec{ID: "j", Schedule: "@yearly", Payload: payloadKind("gate")})
	if err != nil {
		t.Fatal(err)
	}
	res, err := rt.RunNow(t.Context(), j.ID, RunOptions{})
	if err != nil || res.Status != FireAccepted {
		t.Fatalf("%+v %v", res, err)
	}
	es, err := rt.Ledger().Entries(t.Context(), ledger.Filter{JobID: j.ID})
	if err != nil {
		t.Fatal(err)
	}
	var states []ledger.State
	for _, e := range es {
		states = append(states, e.State)
		if e.State == ledger.StateRunning && (e.Token == 0 || e.Output == "") {
			t.Fatalf("running line %+v lacks the claim's token or the output path", e)
		}
	}
	if !slices.Equal(states, []ledger.State{ledger.StateClaimed, ledger.StateRunning}) {
		t.Fatalf("lines when the run was accepted: %v, want claimed and running", states)
	}
	<-g.started
	g.finish(res.RunID, nil)
	r, err := rt.Wait(t.Context(), res.RunID, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if want := []ledger.State{ledger.StateClaimed, ledger.StateRunning, ledger.StateSucceeded}; !slices.Equal(r.States, want) {
		t.Fatalf("run's lines %v, want %v", r.States, want)
	}
}
