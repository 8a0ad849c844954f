package agent

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chronoscron/chronos/agent/fanout"
	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/ledger"
)

// killed is what a fanout killed mid-way and resumed left: its runs, how
// many times each item's command began, and what the resuming agent said.
type killed struct {
	runs  []ledger.Run
	times map[string]int
	said  string
}

// killMidFanout runs a 12-item fanout (concurrency 3) in an agent process,
// kills it (SIGKILL) once 5 children began, and resumes it in another.
func killMidFanout(t *testing.T, onInterrupt string) killed {
	t.Helper()
	bin := agentProc(t)
	home, dir := t.TempDir(), t.TempDir()
	ran := filepath.Join(dir, "ran")
	var items []string
	for i := range 12 {
		items = append(items, fmt.Sprintf("item-%02d", i))
	}
	rt, err := Open(t.Context(), Config{Home: home, Retention: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := rt.AddJob(t.Context(), JobSpec{ID: "fan", Schedule: "@yearly", JobKind: job.JobKindFanout, OnInterrupt: onInterrupt,
		Payload: shell(fmt.Sprintf(`echo "$FANOUT_ITEM" >> %s; sleep 0.3`, ran)),
		Fanout:  &job.Fanout{InputsFrom: writeItems(t, items), Concurrency: 3, PartialTolerance: 0.5}}); err != nil {
		t.Fatal(err)
	}
	if err := rt.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	first := exec.Command(bin, "fanout", "-home", home, "-run", "fan")
	first.Stderr = os.Stderr
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	ranLines := func() []string {
		b, _ := os.ReadFile(ran)
		return strings.Fields(string(b))
	}
	waitFor(t, func() bool { return len(ranLines()) >= 5 })
	if err := first.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	if plans, _ := filepath.Glob(filepath.Join(fanout.Dir(home), "*.json")); len(plans) != 1 {
		t.Fatalf("%d plans on disk after the kill, want 1", len(plans))
	}
	var out bytes.Buffer
	second := exec.Command(bin, "fanout", "-home", home)
	second.Stdout, second.Stderr = &out, os.Stderr
	if err := second.Run(); err != nil {
		t.Fatalf("resume: %v\n%s", err, out.String())
	}
	if plans, _ := filepath.Glob(filepath.Join(fanout.Dir(home), "*.json")); len(plans) != 0 {
		t.Fatalf("plan left after the resumed parent ended: %v", plans)
	}
	k := killed{times: map[string]int{}, said: out.String()}
	for _, it := range ranLines() {
		k.times[it]++
	}
	lg, _ := ledger.Open(filepath.Join(home, "runs"))
	if k.runs, err = lg.Runs(t.Context(), ledger.Filter{JobID: "fan"}); err != nil {
		t.Fatal(err)
	}
	return k
}

func starts(r ledger.Run) int { return strings.Count(fmt.Sprint(r.States), "running") }

// TestFanoutResumesAfterKill kills the agent process mid-fanout and starts
// another: the parent resumes from its durable plan, children that
// finished are not run again, the ones never started run, and the ones cut
// off are recorded interrupted (on_interrupt record: not run again, at
// most once). Every item has exactly one child run.
func TestFanoutResumesAfterKill(t *testing.T) {
	t.Parallel()
	k := killMidFanout(t, "")
	var parent ledger.Run
	succeeded, interrupted := 0, 0
	for _, r := range k.runs {
		switch r.Role {
		case ledger.RoleParent:
			parent = r
		case ledger.RoleChild:
			if n := starts(r); n != 1 {
				t.Fatalf("child %s (%s) started %d times: %v", r.RunID, r.Item, n, r.States)
			}
			switch r.State {
			case ledger.StateSucceeded:
				succeeded++
				if k.times[r.Item] != 1 {
					t.Fatalf("succeeded item %s ran %d times", r.Item, k.times[r.Item])
				}
			case ledger.StateInterrupted:
				// Cut off by the kill, maybe before its command began.
				interrupted++
				if k.times[r.Item] > 1 {
					t.Fatalf("interrupted item %s ran %d times", r.Item, k.times[r.Item])
				}
			default:
				t.Fatalf("child %s %s", r.RunID, r.State)
			}
			delete(k.times, r.Item)
		}
	}
	if len(k.times) != 0 {
		t.Fatalf("items ran without a child run: %v", k.times)
	}
	if succeeded+interrupted != 12 || interrupted == 0 {
		t.Fatalf("%d succeeded and %d interrupted children, want 12 with some interrupted", succeeded, interrupted)
	}
	if !parent.State.Succeeded() || !strings.Contains(k.said, "ended "+string(parent.State)) {
		t.Fatalf("parent %s (%s); resume said %q", parent.State, parent.Reason, k.said)
	}
}

// TestFanoutResumeRetriesInterruptedChildren: under on_interrupt retry the
// children cut off by the kill run again as their next attempt; the
// finished ones still never run again.
func TestFanoutResumeRetriesInterruptedChildren(t *testing.T) {
	t.Parallel()
	k := killMidFanout(t, "retry")
	retried := 0
	for _, r := range k.runs {
		switch {
		case r.Role == ledger.RoleParent && r.State != ledger.StateSucceeded:
			t.Fatalf("parent %s (%s)", r.State, r.Reason)
		case r.Role != ledger.RoleChild:
		case r.State != ledger.StateSucceeded:
			t.Fatalf("child %s %s", r.RunID, r.State)
		case r.Attempt == 2 && starts(r) == 2 && strings.Contains(fmt.Sprint(r.States), "interrupted"):
			retried++
		case r.Attempt != 1 || starts(r) != 1 || k.times[r.Item] != 1:
			t.Fatalf("child %s attempt %d states %v ran %d times", r.RunID, r.Attempt, r.States, k.times[r.Item])
		}
	}
	if retried == 0 {
		t.Fatal("no child was cut off and retried")
	}
}
