package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/chronoscron/chronos/agent/internal/lifecycle"
	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/notify"
	"github.com/chronoscron/chronos/agent/schedule"
	"github.com/chronoscron/chronos/agent/store"
)

// jobOps are the Runtime's operations on job definitions: add, validate,
// read, edit, pause, resume and remove.
type jobOps struct{ rt *Runtime }

// AddJob validates spec and stores the new job. Invalid input wraps
// ErrInvalidJob and a taken id wraps store.ErrExists; either way nothing is
// written. It returns the stored job and its parsed schedule.
func (o jobOps) AddJob(ctx context.Context, spec JobSpec) (job.Job, *schedule.Schedule, error) {
	j, sched, err := newJob(spec, o.rt.now(), o.jobEnv())
	if err != nil {
		return job.Job{}, nil, err
	}
	if err := o.checkNotifyNames(ctx, j.Policy); err != nil {
		return job.Job{}, nil, err
	}
	err = o.rt.store.Update(ctx, func(st *store.State) error {
		return st.Add(j)
	})
	if err != nil {
		return job.Job{}, nil, fmt.Errorf("agent: add job: %w", err)
	}
	o.rt.signal()
	return j.Clone(), sched, nil
}

// ValidateJob checks spec as AddJob would, without storing anything.
func (o jobOps) ValidateJob(spec JobSpec) (job.Job, *schedule.Schedule, error) {
	j, s, err := newJob(spec, o.rt.now(), o.jobEnv())
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
func (o jobOps) checkNotifyNames(ctx context.Context, p notify.Policy) error {
	if o.rt.cfg.NotifyResolver == nil || len(p.Targets) == 0 {
		return nil
	}
	opts := notify.ValidateOptions{Addresses: o.rt.cfg.NotifyAddresses, Resolver: o.rt.cfg.NotifyResolver,
		Unresolved: func(host string, err error) {
			o.rt.log.Warn("notify: a webhook host does not resolve now; it is checked again when a notification is sent",
				"host", host, "error", err)
		}}
	if err := p.Validate(ctx, opts); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidJob, err)
	}
	return nil
}

// jobEnv is what the runtime builds and checks jobs against.
func (o jobOps) jobEnv() jobEnv {
	rt := o.rt
	return jobEnv{loc: rt.cfg.Location, reg: rt.runners, notify: notify.ValidateOptions{Addresses: rt.cfg.NotifyAddresses}, inputs: rt.inputs}
}

// Schedule returns the parsed schedule of j.
func (o jobOps) Schedule(j *job.Job) (*schedule.Schedule, error) {
	return job.ParseSchedule(j, o.rt.cfg.Location)
}

// Job returns a copy of the job with id (error wraps store.ErrNotFound).
func (o jobOps) Job(ctx context.Context, id string) (job.Job, error) {
	return o.rt.store.Get(ctx, id)
}

// Jobs returns copies of all jobs ordered by id.
func (o jobOps) Jobs(ctx context.Context) ([]job.Job, error) {
	return o.rt.store.List(ctx)
}

// modify applies fn to job id under the lock.
func (o jobOps) modify(ctx context.Context, id string, fn func(j *job.Job, now time.Time) error) (job.Job, error) {
	var out job.Job
	err := o.rt.store.Update(ctx, func(st *store.State) error {
		j := st.Job(id)
		if j == nil {
			return fmt.Errorf("%w: %q", store.ErrNotFound, id)
		}
		now := o.rt.now()
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
	o.rt.signal()
	return out, nil
}

// Remove deletes a job. Live runs finish, but their completions are
// discarded (the ledger says so).
func (o jobOps) Remove(ctx context.Context, id string) error {
	p := &lifecycle.Plan{}
	err := o.rt.store.Update(ctx, func(st *store.State) error {
		p.Reset()
		if j := st.Job(id); j != nil {
			o.rt.lc.Recovery.SkipPaused(j, o.rt.now(), p)
		}
		if !st.Remove(id) {
			return fmt.Errorf("%w: %q", store.ErrNotFound, id)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	o.rt.lc.Apply(ctx, p)
	o.rt.signal()
	return nil
}

// ErrRunUnknown is returned by Wait when the ledger has no such run.
var ErrRunUnknown = errors.New("run not found")

// Wait blocks until run runID has a terminal state in the ledger (or ctx
// ends) and returns the folded run. A run of this process is awaited
// directly; a run owned elsewhere is awaited by re-reading the ledger.
func (rt *Runtime) Wait(ctx context.Context, runID string, since time.Time) (ledger.Run, error) {
	if done := rt.runs.Done(runID); done != nil {
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
		if !found && rt.runs.Done(runID) == nil && !rt.lines.HasRun(runID) {
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
