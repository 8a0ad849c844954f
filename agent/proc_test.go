package agent

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/runner"
)

var (
	procOnce sync.Once
	procBin  string
	procErr  error
)

// agentProc builds the helper agent program once per test binary.
func agentProc(t *testing.T) string {
	t.Helper()
	procOnce.Do(func() {
		dir, err := os.MkdirTemp("", "agentproc")
		if err != nil {
			procErr = err
			return
		}
		procBin = filepath.Join(dir, "agentproc")
		out, err := exec.Command("go", "build", "-o", procBin, "./internal/agentproc").CombinedOutput()
		if err != nil {
			procErr = fmt.Errorf("build helper: %v\n%s", err, out)
		}
	})
	if procErr != nil {
		t.Fatal(procErr)
	}
	return procBin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if procBin != "" {
		os.RemoveAll(filepath.Dir(procBin))
	}
	if code == 0 {
		// Every Runtime was closed: none of its goroutines may remain.
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines leaked:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// TestProcessesRaceForSlots starts several agent processes on one home; each
// tries to claim every slot of the same job. Every slot must be claimed
// exactly once.
func TestProcessesRaceForSlots(t *testing.T) {
	t.Parallel()
	bin := agentProc(t)
	const procs, slots = 4, 1000
	home := t.TempDir()
	created := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	rt, err := Open(t.Context(), Config{Home: home, Now: func() time.Time { return created }, Retention: -1,
		Runners: map[string]runner.Runner{"noop": &gate{}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := rt.AddJob(t.Context(), JobSpec{ID: "race", Schedule: "every 1s", Overlap: "allow", Payload: payloadKind("noop")}); err != nil {
		t.Fatal(err)
	}
	if err := rt.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	last := created.Add(slots * time.Second)
	var cmds []*exec.Cmd
	for i := range procs {
		cmd := exec.Command(bin, "race", "-home", home, "-job", "race", "-last", last.Format(time.RFC3339),
			"-out", filepath.Join(home, fmt.Sprintf("wins-%d", i)))
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	for _, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("helper: %v", err)
		}
	}
	claimed := map[string]int{}
	winners := 0
	for i := range procs {
		b, err := os.ReadFile(filepath.Join(home, fmt.Sprintf("wins-%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Fields(string(b))
		if len(lines) > 0 {
			winners++
		}
		for k := 0; k+1 < len(lines); k += 2 {
			claimed[lines[k]]++
		}
	}
	for k := 1; k <= slots; k++ {
		s := created.Add(time.Duration(k) * time.Second).Format(time.RFC3339)
		if claimed[s] != 1 {
			t.Fatalf("slot %s claimed %d times", s, claimed[s])
		}
	}
	if len(claimed) != slots {
		t.Fatalf("%d slots claimed, want %d", len(claimed), slots)
	}
	// The ledger agrees: one claimed and one succeeded line per slot.
	lg, _ := ledger.Open(filepath.Join(home, "runs"))
	runs, err := lg.Runs(t.Context(), ledger.Filter{JobID: "race"})
	if err != nil {
		t.Fatal(err)
	}
	perSlot := map[time.Time]int{}
	for _, r := range runs {
		if r.State == ledger.StateSucceeded {
			perSlot[r.Slot]++
		}
	}
	if len(perSlot) != slots {
		t.Fatalf("ledger has %d succeeded slots, want %d", len(perSlot), slots)
	}
	for s, n := range perSlot {
		if n != 1 {
			t.Fatalf("ledger: slot %s succeeded %d times", s, n)
		}
	}
	t.Logf("%d processes shared %d slots (%d processes won at least one)", procs, slots, winners)
}

// startServe starts `agentproc serve` (with flags) and waits for it to be
// ready.
func startServe(t *testing.T, home string, flags ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(agentProc(t), append([]string{"serve", "-home", home}, flags...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ready") {
		t.Fatalf("helper not ready: %q %v", line, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}

// waitFile waits until path exists (the job's own signal that it runs).
func waitFile(t *testing.T, path string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear within %s", path, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestKilledOwner SIGKILLs an agent process while its job runs. Under
// record the run ends interrupted and the slot never runs again; under
// retry it runs again as attempt 2 with a new fencing token.
func TestKilledOwner(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{"record", "retry"} {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			home := t.TempDir()
			marks := filepath.Join(home, "marks")
			started := filepath.Join(home, "started")
			// The command notes each attempt; the first one then hangs.
			script := fmt.Sprintf(`echo "$CHRONOS_ATTEMPT" >> %s; if [ "$CHRONOS_ATTEMPT" = 1 ]; then touch %s; exec sleep 60; fi`, marks, started)
			rt0, err := Open(t.Context(), Config{Home: home, Retention: -1})
			if err != nil {
				t.Fatal(err)
			}
			_, _, err = rt0.AddJob(t.Context(), JobSpec{ID: "k", Schedule: "in 1s", OnInterrupt: policy,
				Retry:   job.Retry{Backoff: job.Duration(200 * time.Millisecond)},
				Payload: runner.Payload{Kind: "shell", Shell: &runner.Shell{Command: script}}})
			if err != nil {
				t.Fatal(err)
			}
			rt0.Close(t.Context())

			owner := startServe(t, home)
			waitFile(t, started, 15*time.Second)
			if err := owner.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = owner.Wait()

			rt, err := Open(t.Context(), Config{Home: home, Retention: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer rt.Close(context.Background())
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			timerDone := make(chan error, 1)
			go func() { timerDone <- rt.RunTimer(ctx) }()
			defer func() { cancel(); <-timerDone }()

			runID := ""
			for runID == "" {
				runs, err := rt.Ledger().Runs(ctx, ledger.Filter{JobID: "k"})
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range runs {
					if r.State == ledger.StateInterrupted || r.Attempt > 0 && len(r.States) > 3 {
						runID = r.RunID
					}
				}
				if runID == "" {
					select {
					case <-ctx.Done():
						t.Fatal("no interruption recorded")
					case <-time.After(50 * time.Millisecond):
					}
				}
			}
			run, err := rt.Wait(ctx, runID, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			b, _ := os.ReadFile(marks)
			attempts := strings.Fields(string(b))
			switch policy {
			case "record":
				if run.State != ledger.StateInterrupted || !strings.Contains(run.Reason, "is gone") {
					t.Fatalf("run %+v, want interrupted because the owner is gone", run)
				}
				if len(attempts) != 1 {
					t.Fatalf("command ran %d times under record", len(attempts))
				}
			case "retry":
				want := []ledger.State{"claimed", "running", "interrupted", "claimed", "running", "succeeded"}
				if run.State != ledger.StateSucceeded || !equalStates(run.States, want) || run.Token != 2 {
					t.Fatalf("run %+v, want retried to success with token 2", run)
				}
				if strings.Join(attempts, ",") != "1,2" {
					t.Fatalf("attempts %v, want 1,2", attempts)
				}
			}
			runs, _ := rt.Ledger().Runs(ctx, ledger.Filter{JobID: "k"})
			if len(runs) != 1 {
				t.Fatalf("%d runs of the one-shot, want 1", len(runs))
			}
		})
	}
}
