package agent

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/runner"
)

// TestTimerRunsOnTime runs the built-in timer with an `every 2s` shell job
// for about ten seconds (a minute with CHRONOS_SOAK=1): every slot runs once,
// on time, exactly two seconds apart (no drift). Halfway through another
// process adds a job, which the timer picks up and runs on time.
func TestTimerRunsOnTime(t *testing.T) {
	t.Parallel()
	span := 10 * time.Second
	if os.Getenv("CHRONOS_SOAK") == "1" {
		span = time.Minute
	}
	bin := agentProc(t)
	home := t.TempDir()
	rt, err := Open(t.Context(), Config{Home: home, Retention: -1})
	if err != nil {
		t.Fatal(err)
	}
	j, _, err := rt.AddJob(t.Context(), JobSpec{ID: "tick", Schedule: "every 2s",
		Payload: runner.Payload{Kind: "shell", Shell: &runner.Shell{Argv: []string{"true"}}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- rt.RunTimer(ctx) }()

	time.Sleep(span / 2) // let the timer run on its own
	if out, err := exec.Command(bin, "add", "-home", home, "-id", "late", "-schedule", "in 1s", "--", "true").CombinedOutput(); err != nil {
		t.Fatalf("add from another process: %v\n%s", err, out)
	}
	added := time.Now()
	time.Sleep(span / 2)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	if err := rt.Close(cctx); err != nil {
		t.Fatal(err)
	}

	runs, err := rt.Ledger().Runs(context.Background(), ledger.Filter{JobID: "tick"})
	if err != nil {
		t.Fatal(err)
	}
	if want := int(span/(2*time.Second)) - 1; len(runs) < want {
		t.Fatalf("%d runs in %s, want at least %d", len(runs), span, want)
	}
	var worst time.Duration
	for i, r := range runs {
		if r.State != ledger.StateSucceeded || r.Trigger != "scheduled" {
			t.Fatalf("run %d: %s %s (%s)", i, r.State, r.Trigger, r.Reason)
		}
		if off := r.Slot.Sub(j.CreatedAt); off%(2*time.Second) != 0 {
			t.Fatalf("slot %s is off the 2 s grid by %s", r.Slot, off%(2*time.Second))
		}
		if i > 0 && r.Slot.Sub(runs[i-1].Slot) != 2*time.Second {
			t.Fatalf("slots %s and %s are not 2 s apart: drift or a missed slot", runs[i-1].Slot, r.Slot)
		}
		worst = max(worst, time.Duration(r.LatenessMS)*time.Millisecond)
	}
	if worst > time.Second {
		t.Fatalf("worst lateness %s", worst)
	}
	late, err := rt.Ledger().Runs(context.Background(), ledger.Filter{JobID: "late"})
	if err != nil {
		t.Fatal(err)
	}
	if len(late) != 1 || late[0].State != ledger.StateSucceeded || late[0].LatenessMS > 1000 {
		t.Fatalf("job added by another process at %s: runs %+v", added.Format(time.RFC3339Nano), late)
	}
	t.Logf("%d runs, worst lateness %s; the added job ran %d ms after its slot", len(runs), worst, late[0].LatenessMS)
}
