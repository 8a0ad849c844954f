package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/runner"
)

// TestLeaseIsRenewed: a run longer than the lease keeps its claim; another
// agent (another host) that looks later does not take it over.
func TestLeaseIsRenewed(t *testing.T) {
	t.Parallel()
	g := newGate()
	home := t.TempDir()
	rt, err := Open(t.Context(), Config{Home: home, LeaseTTL: 300 * time.Millisecond, Retention: -1,
		Runners: map[string]runner.Runner{"gate": g}})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	if _, _, err := rt.AddJob(t.Context(), JobSpec{ID: "long", Schedule: "@yearly", Payload: payloadKind("gate")}); err != nil {
		t.Fatal(err)
	}
	res, err := rt.RunNow(t.Context(), "long", RunOptions{})
	if err != nil || res.Status != FireAccepted {
		t.Fatalf("%+v %v", res, err)
	}
	<-g.started
	first, _ := rt.Job(t.Context(), "long")
	// Wait until the lease has been extended past its first expiry.
	deadline := time.Now().Add(5 * time.Second)
	for {
		j, _ := rt.Job(t.Context(), "long")
		if len(j.Claims) == 1 && j.Claims[0].LeaseUntil.After(first.Claims[0].LeaseUntil.Add(300*time.Millisecond)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("lease not renewed")
		}
		time.Sleep(50 * time.Millisecond)
	}
	other, err := Open(t.Context(), Config{Home: home, Host: "other-host", Retention: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(context.Background())
	if err := other.CatchUp(t.Context()); err != nil {
		t.Fatal(err)
	}
	g.finish(res.RunID, nil)
	r, err := rt.Wait(t.Context(), res.RunID, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if r.State != ledger.StateSucceeded || r.Discarded {
		t.Fatalf("run %+v, want succeeded by its owner", r)
	}
}

// TestCloseInterruptsRunsWhenItsContextEnds: runs still going when Close's
// context ends are stopped and recorded interrupted; under retry the slot is
// owed again.
func TestCloseInterruptsRunsWhenItsContextEnds(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{"record", "retry"} {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			g := newGate()
			home := t.TempDir()
			rt, err := Open(t.Context(), Config{Home: home, Retention: -1, Runners: map[string]runner.Runner{"gate": g}})
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := rt.AddJob(t.Context(), JobSpec{ID: "c", Schedule: "@yearly", OnInterrupt: policy, Payload: payloadKind("gate")}); err != nil {
				t.Fatal(err)
			}
			res, _ := rt.RunNow(t.Context(), "c", RunOptions{})
			<-g.started
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			if err := rt.Close(ctx); err == nil {
				t.Fatal("close reported no interruption")
			}
			if got, _ := rt.RunNow(t.Context(), "c", RunOptions{}); got.Status != FireBusy {
				t.Fatalf("fire after close: %+v", got)
			}
			again, err := Open(t.Context(), Config{Home: home, Retention: -1, Runners: map[string]runner.Runner{"gate": g}})
			if err != nil {
				t.Fatal(err)
			}
			defer again.Close(context.Background())
			runs, _ := again.Ledger().Runs(t.Context(), ledger.Filter{JobID: "c"})
			if len(runs) != 1 || runs[0].RunID != res.RunID || runs[0].State != ledger.StateInterrupted || !strings.Contains(runs[0].Reason, "shut down") {
				t.Fatalf("runs %+v", runs)
			}
			j, _ := again.Job(t.Context(), "c")
			if len(j.Claims) != 0 || (policy == "retry") != (len(j.Pending) == 1) {
				t.Fatalf("job claims %+v pending %+v", j.Claims, j.Pending)
			}
		})
	}
}

func TestFirePausedJobIsBusy(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.add(t, JobSpec{ID: "p", Schedule: "every 1m"})
	slot := *j.NextRunAt
	if _, err := b.rt.Pause(t.Context(), "p", "holiday"); err != nil {
		t.Fatal(err)
	}
	b.clock.Set(slot)
	res := b.fire(t, "p", slot)
	if res.Status != FireBusy || res.RetryAfter <= 0 || !strings.Contains(res.Reason, "holiday") {
		t.Fatalf("%+v", res)
	}
	if d, _ := b.rt.Desired(t.Context()); len(d) != 0 {
		t.Fatalf("paused job desired: %v", d)
	}
	resumed, err := b.rt.Resume(t.Context(), "p")
	if err != nil || resumed.NextRunAt == nil || !resumed.NextRunAt.After(slot) {
		t.Fatalf("resume: %+v %v", resumed.NextRunAt, err)
	}
	if d, _ := b.rt.Desired(t.Context()); len(d) != 1 || !d[0].FireAt.Equal(*resumed.NextRunAt) {
		t.Fatalf("desired after resume: %v", d)
	}
}

// TestChangesSignalsOtherProcesses: a change through another store handle
// (as another process makes) is signalled on Changes.
func TestChangesSignalsOtherProcesses(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *Config) { c.WatchInterval = 50 * time.Millisecond })
	other, err := Open(t.Context(), Config{Home: b.home, Retention: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(context.Background())
	// Drain signals from setup.
	select {
	case <-b.rt.Changes():
	default:
	}
	if _, _, err := other.AddJob(t.Context(), JobSpec{ID: "x", Schedule: "@daily", Payload: runner.Payload{Kind: "shell", Shell: &runner.Shell{Command: "true"}}}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.rt.Changes():
	case <-time.After(time.Second):
		t.Fatal("change by another handle not signalled within a second")
	}
}

// TestTwoRuntimesInOneProcess: a second Runtime of the same process does not
// take the first one's live claim for a dead owner (same pid, other uuid).
func TestTwoRuntimesInOneProcess(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.add(t, JobSpec{ID: "two", Schedule: "every 1h"})
	b.clock.Set(*j.NextRunAt)
	res := b.fire(t, "two", *j.NextRunAt)
	id := b.started(t)
	second, err := Open(t.Context(), Config{Home: b.home, Now: b.clock.Now, Retention: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close(context.Background())
	if err := second.CatchUp(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := b.job(t, "two"); len(got.Claims) != 1 {
		t.Fatalf("live claim taken: %+v", got.Claims)
	}
	b.gate.finish(id, nil)
	if r := b.wait(t, res.RunID); r.State != ledger.StateSucceeded || len(r.States) != 3 {
		t.Fatalf("run %+v", r)
	}
}

// TestShellRunThroughTheRuntime: output lands in output/<job>/<run>.log and
// a timeout fails the run with its reason.
func TestShellRunThroughTheRuntime(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		command   string
		timeout   time.Duration
		wantState ledger.State
		reason    string
		output    string
	}{
		{"succeeds", `echo "run $CHRONOS_RUN_ID"`, 0, ledger.StateSucceeded, "", "run "},
		{"fails", "echo bad; exit 4", 0, ledger.StateFailed, "exit status 4", "bad\n"},
		{"times out", "echo started; exec sleep 10", 300 * time.Millisecond, ledger.StateFailed, "timeout after 300ms", "started\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.add(t, JobSpec{ID: "sh", Schedule: "@daily", Timeout: tc.timeout,
				Payload: runner.Payload{Kind: "shell", Shell: &runner.Shell{Command: tc.command}}})
			start := time.Now()
			res, err := b.rt.RunNow(t.Context(), "sh", RunOptions{})
			if err != nil {
				t.Fatal(err)
			}
			r := b.wait(t, res.RunID)
			if r.State != tc.wantState || !strings.Contains(r.Reason, tc.reason) || time.Since(start) > 5*time.Second {
				t.Fatalf("run %+v after %s", r, time.Since(start))
			}
			out, err := os.ReadFile(filepath.Join(b.home, r.Output))
			if err != nil || !strings.HasPrefix(string(out), tc.output) {
				t.Fatalf("output %q %v", out, err)
			}
			j := b.job(t, "sh")
			if j.LastStatus != string(tc.wantState) || (tc.wantState == ledger.StateFailed) != (j.FailureStreak == 1) {
				t.Fatalf("job status %s streak %d", j.LastStatus, j.FailureStreak)
			}
		})
	}
}
