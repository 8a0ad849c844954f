package agent

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/runner"
)

// waitOutput waits until the run's output file contains want.
func waitOutput(t *testing.T, b *bundle, jobID, runID, want string) {
	t.Helper()
	path := filepath.Join(b.home, "output", jobID, runID+".log")
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, _ := os.ReadFile(path)
		if strings.Contains(string(out), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("output %q never had %q", out, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestCancelRun(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		command string
		output  string
		minTook time.Duration
	}{
		// The process group gets SIGTERM and the job ends on it.
		{"ends on SIGTERM", `trap 'echo got term; exit 0' TERM; echo started; sleep 30 & wait`, "got term", 0},
		// A job that ignores SIGTERM is killed after the grace.
		{"killed after the grace", `trap '' TERM; echo started; sleep 30 & wait; sleep 30 & wait`, "started", 2 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.add(t, JobSpec{ID: "sh", Schedule: "@daily",
				Payload: runner.Payload{Kind: "shell", Shell: &runner.Shell{Command: tc.command}}})
			res, err := b.rt.RunNow(t.Context(), "sh", RunOptions{})
			if err != nil {
				t.Fatal(err)
			}
			waitOutput(t, b, "sh", res.RunID, "started")
			if !b.rt.Live(res.RunID) {
				t.Fatal("the run is not live")
			}
			start := time.Now()
			if err := b.rt.CancelRun(t.Context(), res.RunID, "by test"); err != nil {
				t.Fatal(err)
			}
			r := b.wait(t, res.RunID)
			took := time.Since(start)
			if r.State != ledger.StateCancelled || !strings.Contains(r.Reason, "by test") || took < tc.minTook || took > 8*time.Second {
				t.Fatalf("run %+v after %s", r, took)
			}
			out, _ := os.ReadFile(filepath.Join(b.home, r.Output))
			if !strings.Contains(string(out), tc.output) {
				t.Fatalf("output %q", out)
			}
			j := b.job(t, "sh")
			if j.LastStatus != string(ledger.StateCancelled) || j.FailureStreak != 0 {
				t.Fatalf("job status %s streak %d", j.LastStatus, j.FailureStreak)
			}
			if err := b.rt.CancelRun(t.Context(), res.RunID, ""); !errors.Is(err, ErrRunNotRunning) {
				t.Fatalf("second cancel: %v", err)
			}
		})
	}
}
