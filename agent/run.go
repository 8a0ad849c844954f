package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/store"
)

// RunOptions are the options of a manual run.
type RunOptions struct {
	// Force runs even if the idempotency window already has a successful
	// run.
	Force bool
}

// RunAndWait runs job id now (RunNow) and waits for the run to end. An
// unknown job wraps store.ErrNotFound; a run that cannot start now (the
// store is busy, the agent is stopping) is an error saying when to try
// again; a chain step whose chain is gone, expired or closed is recorded
// skipped and the error wraps chain.ErrClosed (chain.ErrExpired when it
// expired). A paused job runs, and stays paused: a manual run is how an
// operator tries one before resuming it.
func (rt *Runtime) RunAndWait(ctx context.Context, id string, o RunOptions) (ledger.Run, error) {
	started := time.Now()
	res, err := rt.RunNow(ctx, id, o)
	if err != nil {
		return ledger.Run{}, err
	}
	switch res.Status {
	case FireGone:
		return ledger.Run{}, fmt.Errorf("jobs run: %w: %s", store.ErrNotFound, res.Reason)
	case FireBusy:
		return ledger.Run{}, fmt.Errorf("jobs run: cannot run now: %s (try again in %s)", res.Reason, res.RetryAfter)
	}
	return rt.Wait(ctx, res.RunID, started)
}
