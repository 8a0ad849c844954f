package agent

import (
	"context"
	"errors"
	"fmt"

	"github.com/chronoscron/chronos/agent/store"
)

// errCancelled is the cause given to runs stopped by CancelRun.
var errCancelled = errors.New("cancelled on request")

// ErrRunNotRunning is returned (wrapped) by CancelRun for a run that is not
// in progress.
var ErrRunNotRunning = errors.New("run is not in progress")

// CancelRun stops run runID, in whichever agent process runs it: the
// request is written on the run's claim in the store, and the owner stops
// the run when it sees it (at once when the owner is this process). A
// plain or workflow run's command is stopped; a fanout parent starts no
// more children, its running children get SIGTERM and, 2 s later, SIGKILL,
// and its reducer does not run. The run and each stopped child are
// recorded cancelled.
func (rt *Runtime) CancelRun(ctx context.Context, runID string) error {
	found := false
	err := rt.store.Update(ctx, func(st *store.State) error {
		for _, j := range st.All() {
			if i := j.ClaimIndex(runID); i >= 0 {
				j.Claims[i].Cancel = true
				found = true
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
	rt.cancelRun(runID, errCancelled)
	rt.signal()
	return nil
}

// cancelLoop stops the runs of this process whose claim asks for it, each
// time jobs.json changes.
func (rt *Runtime) cancelLoop(ctx context.Context) {
	defer rt.watchWG.Done()
	ch, done := rt.subscribe()
	defer done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ch:
		}
		if rt.InFlight() == 0 {
			continue
		}
		var ids []string
		_ = rt.store.View(ctx, func(st *store.State) error {
			for _, j := range st.All() {
				for _, c := range j.Claims {
					if c.Cancel && rt.isActive(c.RunID, c.Token) {
						ids = append(ids, c.RunID)
					}
				}
			}
			return nil
		})
		for _, id := range ids {
			rt.cancelRun(id, errCancelled)
		}
	}
}
