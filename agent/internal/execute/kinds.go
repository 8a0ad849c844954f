package execute

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/notify"
	"github.com/chronoscron/chronos/agent/runner"
)

// kind is what a run does around its payload, by job kind.
type kind interface {
	run(ctx context.Context, e *execution) outcome
}

// kindOf is the kind of j's runs, chosen once per run.
func kindOf(j *job.Job) kind {
	switch j.JobKind {
	case job.JobKindWorkflow:
		return workflow{}
	case job.JobKindFanout:
		return fanoutParent{}
	}
	return plain{}
}

// outcome is how a run ended as its job kind decided: the runner's result
// and, when set, the state and reason that override it.
type outcome struct {
	res    runner.Result
	state  ledger.State
	reason string
	// fanout counts a fanout parent's children for its notifications.
	fanout *notify.Fanout
}

// plain runs the payload once.
type plain struct{}

func (plain) run(ctx context.Context, e *execution) outcome {
	return outcome{res: e.runPayload(ctx)}
}

// workflow runs the payload only if its dependencies allow (see gate).
type workflow struct{}

func (workflow) run(ctx context.Context, e *execution) outcome {
	j := e.s.Job
	g := e.x.gate(ctx, &j, e.x.cfg.Now())
	if !g.run {
		fmt.Fprintln(e.out, g.reason)
		e.log.Info("workflow declined", "state", g.state, "reason", g.reason)
		return outcome{res: runner.Result{Err: errors.New(g.reason)}, state: g.state, reason: g.reason}
	}
	fmt.Fprintf(e.out, "workflow: %s\n", g.reason)
	return outcome{res: e.runPayload(ctx)}
}

// DepStatus is what a workflow found of one dependency: the state of its
// latest finished run within the window (DepMissing when none), and that
// run's id.
type DepStatus struct {
	JobID string
	State ledger.State
	RunID string
}

// DepMissing is the DepStatus state of a dependency without a finished run
// in the window.
const DepMissing ledger.State = "missing"

// Dependencies returns, for workflow job j at now, each dependency's latest
// finished run within the window: a run that ran (succeeded, partial,
// failed, interrupted, cancelled), not a slot recorded skipped or missed,
// and not a fanout's child or reducer.
func (x *Executor) Dependencies(ctx context.Context, j *job.Job, now time.Time) ([]DepStatus, error) {
	if j.Workflow == nil {
		return nil, nil
	}
	since := now.Add(-j.Workflow.Window.Std())
	out := make([]DepStatus, 0, len(j.Workflow.DependsOn))
	for _, dep := range j.Workflow.DependsOn {
		runs, err := x.cfg.Ledger.Runs(ctx, ledger.Filter{JobID: dep, Since: since})
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

// gate decides workflow run j at now from the ledger alone: all
// dependencies succeeded in the window runs it; a dependency without a run
// follows on_missing, a failed one on_dep_fail; fail wins over skip, skip
// over run. The reason names each dependency and its status.
func (x *Executor) gate(ctx context.Context, j *job.Job, now time.Time) gateDecision {
	deps, err := x.Dependencies(ctx, j, now)
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
