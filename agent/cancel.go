package agent

import (
	"context"
	"errors"
	"fmt"

	"github.com/chronoscron/chronos/agent/runner"
)

// ErrRunNotLive is returned by CancelRun for a run that is not in progress
// in this process (never started here, or already ended).
var ErrRunNotLive = errors.New("run is not in progress in this agent")

// CancelRun stops run runID of this process on request: a shell run's
// process group gets SIGTERM and, 2 s later, whatever is left of the run is
// killed. The run is recorded cancelled, which is neither a failure of the
// job (its failure streak and notifications are untouched) nor an
// interruption. reason, when not empty, is kept in the ledger line. It
// returns once the stop is asked for; Wait follows the run to its end.
func (rt *Runtime) CancelRun(ctx context.Context, runID, reason string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("agent: cancel %s: %w", runID, err)
	}
	cause := runner.ErrCancelled
	if reason != "" {
		cause = fmt.Errorf("%w: %s", runner.ErrCancelled, reason)
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	r, ok := rt.runs[runID]
	if !ok {
		return fmt.Errorf("agent: cancel %s: %w", runID, ErrRunNotLive)
	}
	r.cancel(cause)
	return nil
}

// Live reports whether run runID is in progress in this process.
func (rt *Runtime) Live(runID string) bool {
	return rt.runDone(runID) != nil
}

// Subscribe returns a channel signalled, coalesced and never blocking the
// sender, after every job change or fire in this process and within
// WatchInterval of a change made by another process, like Changes but for
// one more consumer; stop ends the subscription.
func (rt *Runtime) Subscribe() (changes <-chan struct{}, stop func()) {
	return rt.subscribe()
}
