package agent

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/chronoscron/chronos/agent/ledger"
)

// Runs returns the runs f selects, oldest first (ledger.Filter: JobID,
// Since, Limit, and ParentRunID for the children and reducer of one fanout
// parent).
func (rt *Runtime) Runs(ctx context.Context, f ledger.Filter) ([]ledger.Run, error) {
	runs, err := rt.ledger.Runs(ctx, f)
	if err != nil {
		return nil, fmt.Errorf("runs: %w", err)
	}
	return runs, nil
}

// RunChildren returns the children (in item order) and the reducer (last)
// of fanout parent run id; none for a run that has none.
func (rt *Runtime) RunChildren(ctx context.Context, id string) ([]ledger.Run, error) {
	runs, err := rt.Runs(ctx, ledger.Filter{ParentRunID: id})
	if err != nil {
		return nil, err
	}
	return ledger.OrderChildren(runs), nil
}

// jobOutputs finds job outputs for job:// inputs in rt's ledger.
type jobOutputs struct{ rt *Runtime }

// LatestSuccessOutput returns the output file of jobID's latest successful
// run (not a fanout child or reducer) that began after since.
func (o jobOutputs) LatestSuccessOutput(ctx context.Context, jobID string, since time.Time) (string, bool, error) {
	runs, err := o.rt.ledger.Runs(ctx, ledger.Filter{JobID: jobID, Since: since})
	if err != nil {
		return "", false, err
	}
	for i := len(runs) - 1; i >= 0; i-- {
		r := runs[i]
		if r.State.Succeeded() && r.Output != "" && r.Role != ledger.RoleChild && r.Role != ledger.RoleReducer {
			return filepath.Join(o.rt.cfg.Home, filepath.FromSlash(r.Output)), true, nil
		}
	}
	return "", false, nil
}

// RunGraph returns run id and its children and reducer (RunChildren); an
// id not in the ledger wraps ErrRunUnknown.
func (rt *Runtime) RunGraph(ctx context.Context, id string) (ledger.Run, []ledger.Run, error) {
	r, found, err := rt.ledger.Find(ctx, id, time.Time{})
	if err != nil {
		return r, nil, fmt.Errorf("runs: %w", err)
	}
	if !found {
		return r, nil, fmt.Errorf("runs: %w: %s", ErrRunUnknown, id)
	}
	kids, err := rt.RunChildren(ctx, id)
	return r, kids, err
}
