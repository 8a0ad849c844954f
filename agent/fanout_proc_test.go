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
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/store"
)

// TestFanoutResumesAfterKill kills the agent process (SIGKILL) mid-fanout
// and starts another: the parent resumes from its durable plan, children
// that finished are not run again, the ones never started run, and the
// ones cut off are recorded interrupted (on_interrupt record: not re-run).
// Every item has exactly one child run, started once.
func TestFanoutResumesAfterKill(t *testing.T) {
	t.Parallel()
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
	if _, _, err := rt.AddJob(t.Context(), JobSpec{ID: "fan", Schedule: "@yearly", JobKind: JobKindFanout,
		Payload: shell(fmt.Sprintf(`echo "$FANOUT_ITEM" >> %s; sleep 0.3`, ran)),
		Fanout:  &store.Fanout{InputsFrom: writeItems(t, items), Concurrency: 3, PartialTolerance: 0.5}}); err != nil {
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
	plans, _ := filepath.Glob(filepath.Join(fanout.Dir(home), "*.json"))
	if len(plans) != 1 {
		t.Fatalf("%d plans on disk after the kill, want 1", len(plans))
	}
	var out bytes.Buffer
	second := exec.Command(bin, "fanout", "-home", home)
	second.Stdout, second.Stderr = &out, os.Stderr
	if err := second.Run(); err != nil {
		t.Fatalf("resume: %v\n%s", err, out.String())
	}
	times := map[string]int{}
	for _, it := range ranLines() {
		times[it]++
	}
	lg, _ := ledger.Open(filepath.Join(home, "runs"))
	runs, err := lg.Runs(t.Context(), ledger.Filter{JobID: "fan"})
	if err != nil {
		t.Fatal(err)
	}
	var parent ledger.Run
	succeeded, interrupted := 0, 0
	for _, r := range runs {
		switch r.Role {
		case ledger.RoleParent:
			parent = r
		case ledger.RoleChild:
			if n := strings.Count(fmt.Sprint(r.States), "running"); n != 1 {
				t.Fatalf("child %s (%s) started %d times: %v", r.RunID, r.Item, n, r.States)
			}
			switch r.State {
			case ledger.StateSucceeded:
				succeeded++
				if times[r.Item] != 1 {
					t.Fatalf("succeeded item %s ran %d times", r.Item, times[r.Item])
				}
			case ledger.StateInterrupted:
				// Cut off by the kill (maybe before its command began):
				// at most once under on_interrupt record.
				interrupted++
				if times[r.Item] > 1 {
					t.Fatalf("interrupted item %s ran %d times", r.Item, times[r.Item])
				}
			default:
				t.Fatalf("child %s %s", r.RunID, r.State)
			}
			delete(times, r.Item)
		}
	}
	if len(times) != 0 {
		t.Fatalf("items ran without a child run: %v", times)
	}
	if succeeded+interrupted != len(items) || interrupted == 0 {
		t.Fatalf("%d succeeded and %d interrupted children, want %d with some interrupted", succeeded, interrupted, len(items))
	}
	if !parent.State.Succeeded() || !strings.Contains(out.String(), "ended "+string(parent.State)) {
		t.Fatalf("parent %s (%s); resume said %q", parent.State, parent.Reason, out.String())
	}
	if plans, _ := filepath.Glob(filepath.Join(fanout.Dir(home), "*.json")); len(plans) != 0 {
		t.Fatalf("plan left after the resumed parent ended: %v", plans)
	}
}
