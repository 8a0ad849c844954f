package agent

import (
	"context"
	"time"

	"github.com/chronoscron/chronos/agent/internal/execute"
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
const DepMissing = execute.DepMissing

// Dependencies returns, for workflow job j at now, each dependency's latest
// finished run within the window: a run that ran (succeeded, partial,
// failed, interrupted, cancelled), not a slot recorded skipped or missed,
// and not a fanout's child or reducer.
func (rt *Runtime) Dependencies(ctx context.Context, j *job.Job, now time.Time) ([]DepStatus, error) {
	deps, err := rt.exec.Dependencies(ctx, j, now)
	if deps == nil {
		return nil, err
	}
	out := make([]DepStatus, len(deps))
	for i, d := range deps {
		out[i] = DepStatus(d)
	}
	return out, err
}
