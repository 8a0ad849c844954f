package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/chronoscron/chronos/agent/internal/lifecycle"
	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/notify"
	"github.com/chronoscron/chronos/agent/runner"
	"github.com/chronoscron/chronos/agent/schedule"
	"github.com/chronoscron/chronos/agent/store"
)

// JobPatch changes a job's definition; nil fields are kept. A Flex of 0
// removes the job's flexible window.
type JobPatch struct {
	Name, Schedule, Timezone              *string
	Repeat                                *int
	Payload                               *runner.Payload
	Timeout, Grace, Flex                  *time.Duration
	Misfire, Overlap, Window, OnInterrupt *string
	Retry                                 *job.Retry
	// Notify changes the notification policy as it is when the edit is
	// applied (under the store's lock, so concurrent edits compose).
	Notify *notify.Change
}

// specOf returns the spec that defines j.
func specOf(j *job.Job) JobSpec {
	return JobSpec{ID: j.ID, Name: j.Name, Schedule: j.Schedule, Timezone: j.Timezone, Repeat: j.Repeat.Times,
		Payload: j.Payload, Timeout: j.Timeout.Std(), Misfire: string(j.Misfire), Grace: j.Grace.Std(), Flex: j.Flex.Std(),
		Overlap: string(j.Overlap), Window: string(j.Window), OnInterrupt: string(j.OnInterrupt), Retry: j.Retry,
		Paused: !j.Enabled, PausedReason: j.PausedReason, Notify: j.Policy,
		JobKind: j.JobKind, Workflow: j.Clone().Workflow, Fanout: j.Clone().Fanout}
}

// apply sets the patched fields of spec.
func (p JobPatch) apply(s *JobSpec) error {
	set := func(dst *string, v *string) {
		if v != nil {
			*dst = *v
		}
	}
	if p.Notify != nil {
		n, err := p.Notify.Apply(s.Notify)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidJob, err)
		}
		s.Notify = n
	}
	set(&s.Name, p.Name)
	set(&s.Schedule, p.Schedule)
	set(&s.Timezone, p.Timezone)
	set(&s.Misfire, p.Misfire)
	set(&s.Overlap, p.Overlap)
	set(&s.Window, p.Window)
	set(&s.OnInterrupt, p.OnInterrupt)
	if p.Repeat != nil {
		s.Repeat = *p.Repeat
	}
	if p.Payload != nil {
		s.Payload = *p.Payload
	}
	if p.Timeout != nil {
		s.Timeout = *p.Timeout
	}
	if p.Grace != nil {
		s.Grace = *p.Grace
	}
	if p.Flex != nil {
		s.Flex = *p.Flex
	}
	if p.Retry != nil {
		s.Retry = *p.Retry
	}
	return nil
}

// EditJob changes job id's definition by patch. The job keeps its id, its
// state (pause, runs in progress, owed runs, last results) and so its ledger
// history and its idempotency window. A new schedule or zone counts from
// the edit (a relative "in 30m" is 30 minutes after it) and moves
// next_run_at to its first slot after now; otherwise next_run_at stays. A
// finished job given a new schedule or repeat count is scheduled again.
// A chain step keeps its chain metadata and must keep a one-shot
// schedule. Invalid input wraps ErrInvalidJob and an unknown id
// store.ErrNotFound; either way nothing is written.
func (o jobOps) EditJob(ctx context.Context, id string, patch JobPatch) (job.Job, *schedule.Schedule, error) {
	var out job.Job
	var sched *schedule.Schedule
	if patch.Notify != nil {
		if np, err := patch.Notify.Apply(notify.Policy{}); err == nil {
			if err := o.checkNotifyNames(ctx, np); err != nil {
				return job.Job{}, nil, err
			}
		}
	}
	p := &lifecycle.Plan{}
	err := o.rt.store.Update(ctx, func(st *store.State) error {
		j := st.Job(id)
		if j == nil {
			return fmt.Errorf("%w: %q", store.ErrNotFound, id)
		}
		spec := specOf(j)
		if err := patch.apply(&spec); err != nil {
			return err
		}
		now := o.rt.now()
		p.Reset()
		old := j.Clone()
		o.rt.lc.Recovery.SkipPaused(&old, now, p) // the slots passed while paused, under the old schedule
		nj, s, err := newJob(spec, now, o.jobEnv())
		if err != nil {
			return err
		}
		if j.Chain != nil && s.Kind() != schedule.KindOnce {
			return fmt.Errorf("%w: job %s is a step of chain %s and runs once: give a schedule like 'in 3m' or a timestamp, not %q",
				ErrInvalidJob, j.ID, j.Chain.ChainID, spec.Schedule)
		}
		retimed := nj.Schedule != j.Schedule || nj.Timezone != j.Timezone
		if !retimed {
			nj.CreatedAt = j.CreatedAt
			if s, err = job.ParseSchedule(nj, o.rt.cfg.Location); err != nil {
				return fmt.Errorf("%w: %w", ErrInvalidJob, err)
			}
		}
		keepState(nj, &old, now)
		if !retimed && (j.FinishedAt == nil || nj.Repeat.Times == j.Repeat.Times) {
			nj.NextRunAt, nj.FinishedAt = j.NextRunAt, j.FinishedAt
		}
		if next, ok := s.Next(now); retimed && !nj.Enabled && ok {
			nj.PausedFrom = utcPtr(next)
		}
		*j, sched, out = *nj, s, nj.Clone()
		return nil
	})
	if err != nil {
		return job.Job{}, nil, fmt.Errorf("agent: edit job: %w", err)
	}
	o.rt.lc.Apply(ctx, p)
	o.rt.signal()
	return out, sched, nil
}

// keepState carries what old has lived through over to its edited
// definition nj.
func keepState(nj, old *job.Job, now time.Time) {
	nj.Enabled, nj.PausedReason = old.Enabled, old.PausedReason
	if !nj.Enabled {
		nj.NextRunAt = nil
	}
	nj.Repeat.Completed = old.Repeat.Completed
	nj.LastRunAt, nj.LastStatus, nj.LastError, nj.LastRunID = old.LastRunAt, old.LastStatus, old.LastError, old.LastRunID
	nj.LastSuccessAt, nj.LastSuccessSlot, nj.LastSuccessRun = old.LastSuccessAt, old.LastSuccessSlot, old.LastSuccessRun
	nj.FailureStreak, nj.Fence, nj.Claims, nj.Pending = old.FailureStreak, old.Fence, old.Claims, old.Pending
	nj.PausedFrom = old.PausedFrom
	nj.NotifyStreak, nj.Outbound = old.NotifyStreak, old.Outbound
	nj.Chain = old.Chain.Clone() // a chain step stays one
	nj.UpdatedAt = now.UTC()
}
