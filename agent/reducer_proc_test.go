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
	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/ledger"
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

// killDuringReducer runs a 3-item fanout (attempts: its retry policy's
// max_attempts, 0 for the default) in an agent process, SIGKILLs
// the process while its reducer runs (the reducer's first run marks that
// it began and blocks reading a fifo nobody writes), and recovers the run
// in another process. A later run of the reducer ends at once, succeeded.
func killDuringReducer(t *testing.T, onInterrupt string, attempts int) reducerKilled {
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
	if _, _, err := rt.AddJob(t.Context(), JobSpec{ID: "fan", Schedule: "@yearly", JobKind: job.JobKindFanout, OnInterrupt: onInterrupt,
		Retry: job.Retry{MaxAttempts: attempts}, Payload: shell("true"),
		Fanout: &job.Fanout{InputsFrom: writeItems(t, []string{"a", "b", "c"}), Concurrency: 3,
			Reducer: &job.Reducer{Command: reducer, RunOn: job.ReduceOnSuccess}}}); err != nil {
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

// TestReducerKilled SIGKILLs the agent while a fanout's reducer runs and
// recovers the fanout in another agent process. Under on_interrupt record
// the reducer is recorded interrupted once and never runs again, and the
// resumed parent ends interrupted. Under retry it is recorded interrupted
// and runs again once, as attempt 2, and the parent succeeds. A parent
// with no attempt left is not resumed: it is recorded interrupted, and so
// is its reducer, which does not run again.
func TestReducerKilled(t *testing.T) {
	t.Parallel()
	var (
		claimed     = ledger.StateClaimed
		running     = ledger.StateRunning
		interrupted = ledger.StateInterrupted
		succeeded   = ledger.StateSucceeded
	)
	cases := []struct {
		name        string
		onInterrupt string
		attempts    int
		reduced     int
		reducer     []ledger.State
		parent      []ledger.State
		reason      string
	}{
		{"record", "record", 0, 1, []ledger.State{running, interrupted},
			[]ledger.State{claimed, running, interrupted, claimed, running, interrupted}, "reducer interrupted: not run again"},
		{"retry", "retry", 0, 2, []ledger.State{running, interrupted, running, succeeded},
			[]ledger.State{claimed, running, interrupted, claimed, running, succeeded}, "3 succeeded"},
		{"no attempt left", "retry", 1, 1, []ledger.State{running, interrupted},
			[]ledger.State{claimed, running, interrupted}, "no retry left"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			k := killDuringReducer(t, c.onInterrupt, c.attempts)
			if k.reduced != c.reduced {
				t.Errorf("the reducer's command began %d times, want %d", k.reduced, c.reduced)
			}
			if !slices.Equal(k.reducer.States, c.reducer) {
				t.Errorf("reducer states %v, want %v", k.reducer.States, c.reducer)
			}
			if want := max(len(c.reducer)/2, 1); k.reducer.Attempt != want {
				t.Errorf("reducer attempt %d, want %d", k.reducer.Attempt, want)
			}
			if !slices.Equal(k.parent.States, c.parent) || !strings.Contains(k.parent.Reason, c.reason) {
				t.Errorf("parent states %v (%s), want %v (%s)", k.parent.States, k.parent.Reason, c.parent, c.reason)
			}
			if want := "ended " + string(c.parent[len(c.parent)-1]); !strings.Contains(k.said, want) {
				t.Errorf("recovery said %q, want %q", k.said, want)
			}
		})
	}
}
