package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/notify"
	"github.com/chronoscron/chronos/agent/schedule"
	"github.com/chronoscron/chronos/agent/store"
)

// AddJob validates spec and stores the new job. Invalid input wraps
// ErrInvalidJob and a taken id wraps store.ErrExists; either way nothing is
// written. It returns the stored job and its parsed schedule.
func (rt *Runtime) AddJob(ctx context.Context, spec JobSpec) (job.Job, *schedule.Schedule, error) {
	j, sched, err := newJob(spec, rt.now(), rt.jobEnv())
	if err != nil {
		return job.Job{}, nil, err
	}
	if err := rt.checkNotifyNames(ctx, j.Policy); err != nil {
		return job.Job{}, nil, err
	}
	err = rt.store.Update(ctx, func(st *store.State) error {
		return st.Add(j)
	})
	if err != nil {
		return job.Job{}, nil, fmt.Errorf("agent: add job: %w", err)
	}
	rt.signal()
	return j.Clone(), sched, nil
}

// ValidateJob checks spec as AddJob would, without storing anything.
func (rt *Runtime) ValidateJob(spec JobSpec) (job.Job, *schedule.Schedule, error) {
	j, s, err := newJob(spec, rt.now(), rt.jobEnv())
	if err != nil {
		return job.Job{}, nil, err
	}
	return *j, s, nil
}

// checkNotifyNames checks p's webhook host names as they resolve now, with
// the runtime's NotifyResolver, against its address policy; the checks
// that need no lookup are made with the job. It runs outside the store's
// lock (a lookup may take notify.ResolveTimeout). A refused address wraps
// ErrInvalidJob and notify.ErrAddressNotAllowed.
func (rt *Runtime) checkNotifyNames(ctx context.Context, p notify.Policy) error {
	if rt.cfg.NotifyResolver == nil || len(p.Targets) == 0 {
		return nil
	}
	opts := notify.ValidateOptions{Addresses: rt.cfg.NotifyAddresses, Resolver: rt.cfg.NotifyResolver,
		Unresolved: func(host string, err error) {
			rt.log.Warn("notify: a webhook host does not resolve now; it is checked again when a notification is sent",
				"host", host, "error", err)
		}}
	if err := p.Validate(ctx, opts); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidJob, err)
	}
	return nil
}

// jobEnv is what rt builds and checks jobs against.
func (rt *Runtime) jobEnv() jobEnv {
	return jobEnv{loc: rt.cfg.Location, reg: rt.runners, notify: notify.ValidateOptions{Addresses: rt.cfg.NotifyAddresses}, inputs: rt.inputs}
}

// Schedule returns the parsed schedule of j.
func (rt *Runtime) Schedule(j *job.Job) (*schedule.Schedule, error) {
	return job.ParseSchedule(j, rt.cfg.Location)
}

// Job returns a copy of the job with id (error wraps store.ErrNotFound).
func (rt *Runtime) Job(ctx context.Context, id string) (job.Job, error) {
	return rt.store.Get(ctx, id)
}

// Jobs returns copies of all jobs ordered by id.
func (rt *Runtime) Jobs(ctx context.Context) ([]job.Job, error) {
	return rt.store.List(ctx)
}

// modify applies fn to job id under the lock.
func (rt *Runtime) modify(ctx context.Context, id string, fn func(j *job.Job, now time.Time) error) (job.Job, error) {
	var out job.Job
	err := rt.store.Update(ctx, func(st *store.State) error {
		j := st.Job(id)
		if j == nil {
			return fmt.Errorf("%w: %q", store.ErrNotFound, id)
		}
		now := rt.now()
		if err := fn(j, now); err != nil {
			return err
		}
		j.UpdatedAt = now.UTC()
		out = j.Clone()
		return nil
	})
	if err != nil {
		return job.Job{}, fmt.Errorf("agent: %w", err)
	}
	rt.signal()
	return out, nil
}

// Remove deletes a job. Live runs finish, but their completions are
// discarded (the ledger says so).
func (rt *Runtime) Remove(ctx context.Context, id string) error {
	p := &plan{}
	err := rt.store.Update(ctx, func(st *store.State) error {
		p.lines = nil
		if j := st.Job(id); j != nil {
			rt.skipPaused(j, rt.now(), p)
		}
		if !st.Remove(id) {
			return fmt.Errorf("%w: %q", store.ErrNotFound, id)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	rt.apply(ctx, p)
	rt.signal()
	return nil
}

// ErrRunUnknown is returned by Wait when the ledger has no such run.
var ErrRunUnknown = errors.New("run not found")

// Wait blocks until run runID has a terminal state in the ledger (or ctx
// ends) and returns the folded run. A run of this process is awaited
// directly; a run owned elsewhere is awaited by re-reading the ledger.
func (rt *Runtime) Wait(ctx context.Context, runID string, since time.Time) (ledger.Run, error) {
	if done := rt.runDone(runID); done != nil {
		select {
		case <-done:
		case <-ctx.Done():
			return ledger.Run{}, fmt.Errorf("agent: wait %s: %w", runID, ctx.Err())
		}
	}
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		runs, err := rt.ledger.Runs(ctx, ledger.Filter{Since: since.Add(-24 * time.Hour)})
		if err != nil {
			return ledger.Run{}, err
		}
		found := false
		for _, r := range runs {
			if r.RunID == runID {
				found = true
				if r.State.Terminal() {
					owed, err := rt.owed(ctx, r.JobID, runID)
					if err != nil {
						return ledger.Run{}, err
					}
					if !owed {
						return r, nil
					}
				}
			}
		}
		if !found && rt.runDone(runID) == nil && !rt.heldLine(runID) {
			return ledger.Run{}, fmt.Errorf("agent: wait: %w: %s", ErrRunUnknown, runID)
		}
		select {
		case <-ctx.Done():
			return ledger.Run{}, fmt.Errorf("agent: wait %s: %w", runID, ctx.Err())
		case <-t.C:
		}
	}
}

// owed reports whether run runID of job is still pending or claimed (an
// interrupted run waiting for its retry).
func (rt *Runtime) owed(ctx context.Context, jobID, runID string) (bool, error) {
	owed := false
	err := rt.store.View(ctx, func(st *store.State) error {
		j := st.Job(jobID)
		if j == nil {
			return nil
		}
		for _, q := range j.Pending {
			owed = owed || q.RunID == runID
		}
		owed = owed || j.ClaimIndex(runID) >= 0
		return nil
	})
	return owed, err
}

// runDoneOr returns the local run's done channel, or a closed channel.
func (rt *Runtime) runDoneOr(runID string) <-chan struct{} {
	if d := rt.runDone(runID); d != nil {
		return d
	}
	c := make(chan struct{})
	close(c)
	return c
}
