package agent

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/internal/procfs"
	"github.com/chronoscron/chronos/agent/internal/runs"
	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/runner"
	"github.com/chronoscron/chronos/agent/store"
)

// orphanRun starts what a killed agent leaves of run runID: its shell has
// exited, and two setsid processes live on, one with the run's
// environment and one without. It returns the record a claim would hold
// (leader first) and the two survivors.
func orphanRun(t *testing.T, runID string) (record []runner.Process, left []runner.Process) {
	t.Helper()
	sh := exec.Command("sh", "-c", `setsid sleep 30 >/dev/null & echo $!; setsid env -i "$(command -v sleep)" 31 >/dev/null & echo $!`)
	sh.Env = append(os.Environ(), runner.EnvRunID+"="+runID)
	sh.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := sh.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	st, err := procfs.Read(sh.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	record = append(record, runner.Process{PID: st.PID, Start: st.Start})
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		pid, err := strconv.Atoi(sc.Text())
		if err != nil {
			t.Fatal(err)
		}
		st, err := procfs.Read(pid)
		if err != nil || st.Dead() {
			t.Fatalf("process %d: %v", pid, err)
		}
		p := runner.Process{PID: pid, Start: st.Start}
		left = append(left, p)
		t.Cleanup(func() { _ = syscall.Kill(p.PID, syscall.SIGKILL) })
	}
	if err := sh.Wait(); err != nil || len(left) != 2 {
		t.Fatalf("orphan run: %v, %d processes", err, len(left))
	}
	return append(record, left[1]), left
}

func running(p runner.Process) bool {
	s, err := procfs.Read(p.PID)
	return err == nil && s.Start == p.Start && !s.Dead()
}

// TestRecoverSettlesADeadOwnersRun: Recover records the run of an agent
// that died interrupted, kills what is left of its processes (the one
// recorded and the one that names the run in its environment) before
// anything else, and under retry starts attempt 2 at once with a new
// fencing token.
func TestRecoverSettlesADeadOwnersRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.add(t, JobSpec{ID: "rec", Schedule: "every 1h", OnInterrupt: "retry"})
	runID := fmt.Sprintf("r20260601T090000-recover%d", os.Getpid())
	record, left := orphanRun(t, runID)
	owner := fmt.Sprintf("%s:%d:dead", runs.Hostname(), deadPID(t))
	err := b.rt.Store().Update(t.Context(), func(st *store.State) error {
		j := st.Job("rec")
		slot := *j.NextRunAt
		j.AddClaim(job.Claim{RunID: runID, Slot: slot, Trigger: "scheduled", Attempt: 1, Owner: owner,
			OwnerBoot: procfs.BootID(), OwnerNS: procfs.PIDNamespace(), OwnerStart: 1, LeaseUntil: slot.Add(time.Hour), ClaimedAt: slot, Procs: record})
		next := slot.Add(time.Hour)
		j.NextRunAt = &next
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	b.clock.Set(t0.Add(time.Hour + time.Minute))
	if err := b.rt.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	// Killed before Recover returned (the kernel may still be finishing).
	deadline := time.Now().Add(5 * time.Second)
	for _, p := range left {
		for running(p) {
			if time.Now().After(deadline) {
				t.Fatalf("process %+v of the dead owner's run survived", p)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if id := b.started(t); id != runID {
		t.Fatalf("started %s, want the retry of %s", id, runID)
	}
	j := b.job(t, "rec")
	if len(j.Claims) != 1 || j.Claims[0].Attempt != 2 || j.Claims[0].Token != 2 || j.Claims[0].Owner != b.rt.Owner() {
		t.Fatalf("claims %+v, want attempt 2 with token 2 owned here", j.Claims)
	}
	b.gate.finish(runID, nil)
	r := b.wait(t, runID)
	want := []ledger.State{"interrupted", "claimed", "running", "succeeded"}
	if r.State != ledger.StateSucceeded || !equalStates(r.States, want) || !strings.Contains(lineReasons(t, b, runID), "is gone; retry 2/3 now") {
		t.Fatalf("run %+v, want %v", r, want)
	}
}

// TestStoppedRunsLeaveNoProcess: a run stopped by its timeout or replaced
// by the next slot (overlap replace) is killed with its whole process
// tree, the setsid grandchild included.
func TestStoppedRunsLeaveNoProcess(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		overlap string
		reason  string
	}{
		{"timeout", 200 * time.Millisecond, "", "timeout after 200ms"},
		{"replace", 0, "replace", "overlap replace: replaced by run"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			marks := t.TempDir()
			// Only the first run starts the grandchild; a later one (the
			// replacing run) ends at once.
			script := fmt.Sprintf(`if [ ! -e %[1]s/pid ]; then setsid sleep 30 >/dev/null 2>&1 & echo $! > %[1]s/pid; touch %[1]s/ready; wait; fi`, marks)
			j := b.add(t, JobSpec{ID: "stop", Schedule: "every 1h", Timeout: tc.timeout, Overlap: tc.overlap,
				Payload: runner.Payload{Kind: "shell", Shell: &runner.Shell{Command: script}}})
			b.clock.Set(*j.NextRunAt)
			first := b.fire(t, "stop", *j.NextRunAt)
			ready := marks + "/ready"
			deadline := time.Now().Add(10 * time.Second)
			for {
				if _, err := os.Stat(ready); err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the run did not start its grandchild")
				}
				time.Sleep(5 * time.Millisecond)
			}
			raw, err := os.ReadFile(marks + "/pid")
			if err != nil {
				t.Fatal(err)
			}
			pid, _ := strconv.Atoi(strings.TrimSpace(string(raw)))
			st, err := procfs.Read(pid)
			if err != nil {
				t.Fatal(err)
			}
			grandchild := runner.Process{PID: pid, Start: st.Start}
			t.Cleanup(func() {
				if running(grandchild) {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			})
			if tc.overlap == "replace" {
				next := b.job(t, "stop").NextRunAt
				b.clock.Set(*next)
				b.fire(t, "stop", *next)
			}
			r := b.wait(t, first.RunID)
			if !strings.Contains(r.Reason, tc.reason) {
				t.Fatalf("run %+v, want %q", r, tc.reason)
			}
			deadline = time.Now().Add(5 * time.Second)
			for running(grandchild) {
				if time.Now().After(deadline) {
					t.Fatalf("the setsid grandchild of the stopped run survived")
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
}
