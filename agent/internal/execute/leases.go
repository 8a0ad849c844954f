package execute

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/chronoscron/chronos/agent/internal/runs"
	"github.com/chronoscron/chronos/agent/store"
)

var errLeaseLost = errors.New("claim lost: lease expired or taken over")

// RenewLoop extends the leases of all runs of this process every third of
// the lease TTL, in one store update, and records their processes when
// they change; a run whose claim is gone (lease lost, replaced, job
// removed) is stopped. It returns when ctx ends.
func (x *Executor) RenewLoop(ctx context.Context) {
	t := time.NewTicker(x.cfg.LeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-x.cfg.Runs.Persist():
		}
		if x.cfg.Runs.Len() == 0 {
			continue
		}
		var lost []*runs.Run
		err := x.cfg.Store.Update(ctx, func(st *store.State) error {
			live := x.cfg.Runs.Snapshot()
			held := map[string]bool{}
			until := x.cfg.Now().Add(x.cfg.LeaseTTL).UTC()
			for _, l := range live {
				j := st.Job(l.Run.JobID)
				if j == nil {
					continue
				}
				for i := range j.Claims {
					c := &j.Claims[i]
					if lr, ok := live[c.RunID]; ok && lr.Run.Token == c.Token {
						c.LeaseUntil = until
						if ps := lr.Procs; ps != nil {
							c.Procs = append(c.Procs[:0:0], ps...)
						}
						held[c.RunID] = true
					}
				}
			}
			lost = lost[:0]
			for id, l := range live {
				if !held[id] {
					lost = append(lost, l.Run)
				}
			}
			return nil
		})
		if err != nil {
			if ctx.Err() == nil {
				x.cfg.Log.Warn("lease renewal failed", "error", err)
			}
			continue
		}
		for _, r := range lost {
			r.Cancel(errLeaseLost)
		}
	}
}

// CancelCause is the cause a run cancelled with reason is stopped with.
func CancelCause(reason string) error {
	if reason == "" {
		return runs.ErrCancelled
	}
	return fmt.Errorf("%w: %s", runs.ErrCancelled, reason)
}

// CancelLoop stops the runs of this process whose claim asks for it, each
// time changes signals a change of jobs.json, until ctx ends.
func (x *Executor) CancelLoop(ctx context.Context, changes <-chan struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-changes:
		}
		// Only the jobs this process runs now have claims a cancel can
		// stop here: the loop reads them alone, not every job.
		jobs := x.cfg.Runs.JobIDs()
		if len(jobs) == 0 {
			continue
		}
		causes := map[string]error{}
		_ = x.cfg.Store.View(ctx, func(st *store.State) error {
			for id := range jobs {
				j := st.Job(id)
				if j == nil {
					continue
				}
				for _, c := range j.Claims {
					if c.Cancel && x.cfg.Runs.Active(c.RunID, c.Token) {
						causes[c.RunID] = CancelCause(c.CancelReason)
					}
				}
			}
			return nil
		})
		for id, cause := range causes {
			x.cfg.Runs.Cancel(id, cause)
		}
	}
}
