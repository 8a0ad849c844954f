package agent

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/chronoscron/chronos/agent/fanout"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/store"
)

// reducerKilled is what a fanout whose agent died during the reducer left
// once another agent process recovered it.
type reducerKilled struct {
	parent, reducer ledger.Run
	children        []ledger.Run
	// reduced is how many times the reducer's command began.
	reduced int
	said    string
}

// killDuringReducer runs a 3-item fanout in an agent process, SIGKILLs
// the process while its reducer runs (the reducer's first run marks that
// it began and blocks reading a fifo nobody writes), and recovers the run
// in another process. A later run of the reducer ends at once, succeeded.
func killDuringReducer(t *testing.T, onInterrupt string) reducerKilled {
	t.Helper()
	bin := agentProc(t)
	home, dir := t.TempDir(), t.TempDir()
	began, fifo, reduced := filepath.Join(dir, "began"), filepath.Join(dir, "fifo"), filepath.Join(dir, "reduced")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	reducer := fmt.Sprintf(`echo run >> %[1]s; if [ ! -e %[2]s ]; then touch %[2]s; read line < %[3]s; fi`, reduced, began, fifo)
	rt, err := Open(t.Context(), Config{Home: home, Retention: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := rt.AddJob(t.Context(), JobSpec{ID: "fan", Schedule: "@yearly", JobKind: JobKindFanout, OnInterrupt: onInterrupt,
		Payload: shell("true"),
		Fanout: &store.Fanout{InputsFrom: writeItems(t, []string{"a", "b", "c"}), Concurrency: 3,
			Reducer: &store.Reducer{Command: reducer, RunOn: store.ReduceOnSuccess}}}); err != nil {
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
	waitFor(t, func() bool { _, err := os.Stat(began); return err == nil })
	if err := first.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	var out bytes.Buffer
	second := exec.Command(bin, "fanout", "-home", home)
	second.Stdout, second.Stderr = &out, os.Stderr
	if err := second.Run(); err != nil {
		t.Fatalf("recover: %v\n%s", err, out.String())
	}
	if plans, _ := filepath.Glob(filepath.Join(fanout.Dir(home), "*.json")); len(plans) != 0 {
		t.Fatalf("plan left after the parent ended: %v", plans)
	}
	b, err := os.ReadFile(reduced)
	if err != nil {
		t.Fatal(err)
	}
	k := reducerKilled{reduced: len(strings.Fields(string(b))), said: out.String()}
	lg, err := ledger.Open(filepath.Join(home, "runs"))
	if err != nil {
		t.Fatal(err)
	}
	runs, err := lg.Runs(t.Context(), ledger.Filter{JobID: "fan"})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range runs {
		switch r.Role {
		case ledger.RoleParent:
			k.parent = r
		case ledger.RoleReducer:
			k.reducer = r
		case ledger.RoleChild:
			k.children = append(k.children, r)
		}
	}
	if len(k.children) != 3 {
		t.Fatalf("%d children, want 3", len(k.children))
	}
	for _, c := range k.children {
		if !slices.Equal(c.States, []ledger.State{ledger.StateRunning, ledger.StateSucceeded}) {
			t.Fatalf("child %s states %v: a child that finished before the kill ran again", c.RunID, c.States)
		}
	}
	return k
}

// TestReducerKilledUnderRecord: under on_interrupt record the reducer cut
// off by the agent's death is recorded interrupted once when the next
// agent recovers the fanout, and never runs again; the parent ends
// interrupted.
func TestReducerKilledUnderRecord(t *testing.T) {
	t.Parallel()
	k := killDuringReducer(t, "record")
	if k.reduced != 1 {
		t.Fatalf("the reducer's command began %d times, want 1 (at most once under record)", k.reduced)
	}
	want := []ledger.State{ledger.StateRunning, ledger.StateInterrupted}
	if !slices.Equal(k.reducer.States, want) {
		t.Fatalf("reducer states %v, want %v", k.reducer.States, want)
	}
	if k.parent.State != ledger.StateInterrupted || !strings.Contains(k.parent.Reason, "reducer interrupted") {
		t.Fatalf("parent %s (%s), want interrupted by its reducer", k.parent.State, k.parent.Reason)
	}
	if !strings.Contains(k.said, "ended interrupted") {
		t.Fatalf("recovery said %q", k.said)
	}
}

// TestReducerKilledUnderRetry: under on_interrupt retry the reducer cut
// off by the agent's death is recorded interrupted and runs again once, as
// attempt 2, and the parent succeeds.
func TestReducerKilledUnderRetry(t *testing.T) {
	t.Parallel()
	k := killDuringReducer(t, "retry")
	if k.reduced != 2 {
		t.Fatalf("the reducer's command began %d times, want 2", k.reduced)
	}
	want := []ledger.State{ledger.StateRunning, ledger.StateInterrupted, ledger.StateRunning, ledger.StateSucceeded}
	if !slices.Equal(k.reducer.States, want) {
		t.Fatalf("reducer states %v, want %v", k.reducer.States, want)
	}
	if k.reducer.Attempt != 2 {
		t.Fatalf("reducer attempt %d, want 2", k.reducer.Attempt)
	}
	if k.parent.State != ledger.StateSucceeded {
		t.Fatalf("parent %s (%s), want succeeded", k.parent.State, k.parent.Reason)
	}
}
