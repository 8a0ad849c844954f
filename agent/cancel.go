package agent

import (
	"context"
	"errors"
	"fmt"

	"github.com/chronoscron/chronos/agent/internal/execute"
	"github.com/chronoscron/chronos/agent/store"
)

// ErrRunNotRunning is returned (wrapped) by CancelRun for a run that is not
// in progress.
var ErrRunNotRunning = errors.New("run is not in progress")

// CancelRun stops run runID, in whichever agent process runs it: the
// request is written on the run's claim in the store, and the owner stops
// the run when it sees it (at once when the owner is this process). A
// plain or workflow run's command is stopped (SIGTERM to its process group,
// SIGKILL 2 s later); a fanout parent starts no more children, its running
// children are stopped the same way, and its reducer does not run. The run
// and each stopped child are recorded cancelled, which is neither a failure
// of the job (its failure streak and notifications are untouched) nor an
// interruption. reason, when not empty, is kept in the ledger line. It
// returns once the stop is asked for; Wait follows the run to its end.
func (rt *Runtime) CancelRun(ctx context.Context, runID, reason string) error {
	found := false
	err := rt.store.Update(ctx, func(st *store.State) error {
		for _, j := range st.All() {
			if i := j.ClaimIndex(runID); i >= 0 {
				found = !j.Claims[i].Cancel
				j.Claims[i].Cancel = true
				j.Claims[i].CancelReason = reason
				return nil
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("cancel run %s: %w", runID, err)
	}
	if !found {
		return fmt.Errorf("cancel run %s: %w", runID, ErrRunNotRunning)
	}
	rt.runs.Cancel(runID, execute.CancelCause(reason))
	rt.signal()
	return nil
}

// Live reports whether run runID is in progress in this process.
func (rt *Runtime) Live(runID string) bool {
	return rt.runs.Done(runID) != nil
}

// Subscribe returns a channel signalled, coalesced and never blocking the
// sender, after every job change or fire in this process and within
// WatchInterval of a change made by another process, like Changes but for
// one more consumer; stop ends the subscription.
func (rt *Runtime) Subscribe() (changes <-chan struct{}, stop func()) {
	return rt.subscribe()
}
