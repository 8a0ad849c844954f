package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/chronoscron/chronos/agent/internal/lifecycle"
	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/store"
)

// ReasonPaused is the ledger reason of a slot that passed while its job was
// paused, and of an owed run dropped by the pause.
const ReasonPaused = lifecycle.ReasonPaused

// Pause disables a job: it keeps its record and live runs but has no
// next_run_at, so nothing is armed for it. Runs it owed (queued behind a
// live run, waiting to retry) are dropped and recorded skipped, and each
// slot that passes while it is paused is recorded skipped with reason
// "paused" (see RecordPaused).
func (o jobOps) Pause(ctx context.Context, id, reason string) (job.Job, error) {
	return o.change(ctx, id, func(j *job.Job, now time.Time, p *lifecycle.Plan) error {
		if j.Enabled && j.FinishedAt == nil && j.NextRunAt != nil {
			j.PausedFrom = utcPtr(*j.NextRunAt)
		}
		j.Enabled = false
		j.PausedReason = strings.TrimSpace(reason)
		j.NextRunAt = nil
		o.rt.lc.Recovery.SkipPaused(j, now, p)
		return nil
	})
}

// Resume enables a paused job; its next_run_at becomes the first slot after
// now (the slots passed while paused are recorded skipped, not run). A
// finished job cannot be resumed.
func (o jobOps) Resume(ctx context.Context, id string) (job.Job, error) {
	return o.change(ctx, id, func(j *job.Job, now time.Time, p *lifecycle.Plan) error {
		if j.FinishedAt != nil {
			return fmt.Errorf("%w: job %q has finished", ErrInvalidJob, id)
		}
		sched, err := job.ParseSchedule(j, o.rt.cfg.Location)
		if err != nil {
			return err
		}
		o.rt.lc.Recovery.SkipPaused(j, now, p)
		j.Enabled, j.PausedReason, j.PausedFrom = true, "", nil
		next, ok := sched.Next(now)
		if !ok {
			j.NextRunAt, j.FinishedAt = nil, utcPtr(now)
			return nil
		}
		j.NextRunAt = utcPtr(next)
		return nil
	})
}

// RecordPaused records skipped, with reason "paused", every slot of a
// paused job that has passed and is not recorded yet, and returns how many
// it recorded. It never runs anything. CatchUp does it too.
func (o recoveryOps) RecordPaused(ctx context.Context) (int, error) {
	return o.rt.lc.Recovery.RecordPaused(ctx)
}

// change applies fn to job id under the lock and writes the ledger lines it
// planned once the change is durable.
func (o jobOps) change(ctx context.Context, id string, fn func(j *job.Job, now time.Time, p *lifecycle.Plan) error) (job.Job, error) {
	p := &lifecycle.Plan{}
	j, err := o.modify(ctx, id, func(j *job.Job, now time.Time) error {
		p.Reset()
		return fn(j, now, p)
	})
	if err != nil {
		return j, err
	}
	o.rt.lc.Apply(ctx, p)
	return j, nil
}

// RecordPausedIn opens the home of cfg, records the slots passed while its
// jobs are paused (RecordPaused) and closes it; a home without jobs has
// none. For readers of the ledger, such as runs list, that do not keep a
// Runtime open.
func RecordPausedIn(ctx context.Context, cfg Config) error {
	if _, err := os.Stat(filepath.Join(cfg.Home, store.JobsFile)); err != nil {
		return nil
	}
	cfg.Retention = -1
	rt, err := Open(ctx, cfg)
	if err != nil {
		return err
	}
	_, err = rt.RecordPaused(ctx)
	if cerr := rt.Close(ctx); err == nil {
		err = cerr
	}
	return err
}

// ReadRuns records the slots passed while the jobs of cfg's home are paused
// (RecordPausedIn), then reads the runs f selects from the home's ledger;
// never nil. For runs list.
func ReadRuns(ctx context.Context, cfg Config, f ledger.Filter) ([]ledger.Run, error) {
	if err := RecordPausedIn(ctx, cfg); err != nil {
		return nil, err
	}
	lg, err := ledger.Open(filepath.Join(cfg.Home, "runs"))
	if err != nil {
		return nil, err
	}
	runs, err := lg.Runs(ctx, f)
	if runs == nil && err == nil {
		runs = []ledger.Run{}
	}
	return runs, err
}
