package demo

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/notify"
	"github.com/chronoscron/chronos/agent/runner"
	"github.com/chronoscron/chronos/agent/store"
)

// sampleJob is a sample job of the demo. notifyFile, when set, names a
// file in the home its failures are reported to (a notify target).
type sampleJob struct {
	id, schedule, command, about string
	notifyFile                   string
}

// sampleJobs are the sample jobs: the first fires within 3 s of the start.
var sampleJobs = []sampleJob{
	{"tick", "every 3s", `echo "tick for slot $CHRONOS_FIRE_AT"`, "an interval, anchored at creation", ""},
	{"once", "in 5s", `echo "one-shot run $CHRONOS_RUN_ID"`, "a one-shot, 5 s after creation", ""},
	{"paris", "CRON_TZ=Europe/Paris */10 * * * * *", `echo "Paris says $(TZ=Europe/Paris date +%H:%M:%S)"`, "cron with seconds, in a zone", ""},
	{"flaky", "every 2s", `echo "disk check failed" >&2; exit 1`, "fails; its alert goes to a file", alertsFile},
}

// alertsFile is the file in the demo's home the failing sample job's
// notifications are appended to, one JSON line each.
const alertsFile = "notifications.jsonl"

// keysWait bounds the wait for the agent to be ready with NAS's key set.
const keysWait = 10 * time.Second

// addSampleJobs waits (up to keysWait) for the agent to be ready with NAS's
// key set, then adds the sample jobs, or finds them in a kept home, and
// lists them. It returns nil without adding anything when ctx ends first.
func addSampleJobs(ctx context.Context, a *agentSide, n *narrator) error {
	wctx, cancel := context.WithTimeout(ctx, keysWait)
	defer cancel()
	if err := a.waitReady(wctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("demo: the agent could not load NAS's keys: %w", err)
	}
	n.header("  jobs")
	for _, j := range sampleJobs {
		job, err := addSampleJob(ctx, a.rt, j)
		if err != nil {
			return err
		}
		next := "none"
		if job.NextRunAt != nil {
			next = clock(*job.NextRunAt)
		}
		n.header("    %-6s %-38s %s; first fire %s", j.id, j.schedule, j.about, next)
	}
	return nil
}

// addSampleJob adds j, or returns the job of that id a kept home has.
func addSampleJob(ctx context.Context, rt *agent.Runtime, j sampleJob) (job.Job, error) {
	spec := agent.JobSpec{ID: j.id, Name: j.about, Schedule: j.schedule,
		Payload: runner.Payload{Kind: "shell", Shell: &runner.Shell{Command: j.command}}, Timeout: 30 * time.Second}
	if j.notifyFile != "" {
		spec.Notify = notify.Policy{Targets: []notify.Target{{Kind: notify.KindFile, Path: filepath.Join(rt.Store().Home(), j.notifyFile)}}}
	}
	job, _, err := rt.AddJob(ctx, spec)
	switch {
	case errors.Is(err, store.ErrExists):
		job, err = rt.Job(ctx, j.id)
		if err != nil {
			return job, fmt.Errorf("demo: %w", err)
		}
	case err != nil:
		return job, fmt.Errorf("demo: add job %s: %w", j.id, err)
	}
	return job, nil
}

// runDetail describes a finished run from the ledger: exit code and the first
// line of its output.
func runDetail(rt *agent.Runtime, home, jobID, runID string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	runs, err := rt.Ledger().Runs(ctx, ledger.Filter{JobID: jobID})
	if err != nil {
		return ""
	}
	for _, r := range runs {
		if r.RunID != runID {
			continue
		}
		detail := fmt.Sprintf("exit %d", r.ExitCode)
		if r.Output != "" {
			if b, err := os.ReadFile(filepath.Join(home, r.Output)); err == nil {
				line, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
				if len(line) > 60 {
					line = line[:60] + "…"
				}
				detail += fmt.Sprintf(", output %q", line)
			}
		}
		return detail
	}
	return ""
}

// noticeDetail names where notification id went, from the outbox.
func noticeDetail(rt *agent.Runtime, id string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	box, err := rt.Outbox()
	if err != nil {
		return ""
	}
	row, err := box.Get(ctx, id)
	if err != nil {
		return ""
	}
	return row.Target.Where()
}
