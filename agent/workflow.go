package agent

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/chronoscron/chronos/agent/job"

	"github.com/chronoscron/chronos/agent/ledger"
)

// DepStatus is what a workflow found of one dependency: the state of its
// latest finished run within the window ("missing" when none), and that
// run's id.
type DepStatus struct {
	JobID string       `json:"job_id"`
	State ledger.State `json:"state"`
	RunID string       `json:"run_id,omitempty"`
}

// DepMissing is the DepStatus state of a dependency without a finished run
// in the window.
const DepMissing ledger.State = "missing"

// Dependencies returns, for workflow job j at now, each dependency's latest
// finished run within the window: a run that ran (succeeded, partial,
// failed, interrupted, cancelled), not a slot recorded skipped or missed,
// and not a fanout's child or reducer.
func (rt *Runtime) Dependencies(ctx context.Context, j *job.Job, now time.Time) ([]DepStatus, error) {
	if j.Workflow == nil {
		return nil, nil
	}
	since := now.Add(-j.Workflow.Window.Std())
	out := make([]DepStatus, 0, len(j.Workflow.DependsOn))
	for _, dep := range j.Workflow.DependsOn {
		runs, err := rt.ledger.Runs(ctx, ledger.Filter{JobID: dep, Since: since})
		if err != nil {
			return nil, fmt.Errorf("workflow %s: dependency %s: %w", j.ID, dep, err)
		}
		ds := DepStatus{JobID: dep, State: DepMissing}
		for i := len(runs) - 1; i >= 0; i-- {
			r := runs[i]
			if r.Role == ledger.RoleChild || r.Role == ledger.RoleReducer || r.LastAt.Before(since) || !ranState(r.State) {
				continue
			}
			ds.State, ds.RunID = r.State, r.RunID
			break
		}
		out = append(out, ds)
	}
	return out, nil
}

func ranState(s ledger.State) bool {
	switch s {
	case ledger.StateSucceeded, ledger.StatePartial, ledger.StateFailed, ledger.StateInterrupted, ledger.StateCancelled:
		return true
	}
	return false
}

// gateDecision is a workflow's answer at its fire time: run its command,
// or end the run with state and reason.
type gateDecision struct {
	run    bool
	state  ledger.State
	reason string
}

// workflowGate decides workflow run j at now from the ledger alone: all
// dependencies succeeded in the window runs it; a dependency without a run
// follows on_missing, a failed one on_dep_fail; fail wins over skip, skip
// over run. The reason names each dependency and its status.
func (rt *Runtime) workflowGate(ctx context.Context, j *job.Job, now time.Time) gateDecision {
	deps, err := rt.Dependencies(ctx, j, now)
	if err != nil {
		return gateDecision{state: ledger.StateFailed, reason: err.Error()}
	}
	parts := make([]string, 0, len(deps))
	var missing, failed bool
	for _, d := range deps {
		parts = append(parts, fmt.Sprintf("%s %s", d.JobID, d.State))
		switch {
		case d.State == DepMissing:
			missing = true
		case !d.State.Succeeded():
			failed = true
		}
	}
	var ds []job.Decision
	if missing {
		ds = append(ds, j.Workflow.OnMissing)
	}
	if failed {
		ds = append(ds, j.Workflow.OnDepFail)
	}
	desc := fmt.Sprintf("dependencies within %s: %s", j.Workflow.Window.Std(), strings.Join(parts, ", "))
	verdict := job.DecisionRun
	for _, d := range ds {
		if d == job.DecisionFail || (d == job.DecisionSkip && verdict == job.DecisionRun) {
			verdict = d
		}
	}
	switch verdict {
	case job.DecisionFail:
		return gateDecision{state: ledger.StateFailed, reason: "workflow failed: " + desc}
	case job.DecisionSkip:
		return gateDecision{state: ledger.StateSkipped, reason: "workflow skipped: " + desc}
	}
	return gateDecision{run: true, reason: desc}
}
