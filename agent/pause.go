package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/store"
)

// ReasonPaused is the ledger reason of a slot that passed while its job was
// paused, and of an owed run dropped by the pause.
const ReasonPaused = "paused"

// Pause disables a job: it keeps its record and live runs but has no
// next_run_at, so nothing is armed for it. Runs it owed (queued behind a
// live run, waiting to retry) are dropped and recorded skipped, and each
// slot that passes while it is paused is recorded skipped with reason
// "paused" (see RecordPaused).
func (rt *Runtime) Pause(ctx context.Context, id, reason string) (job.Job, error) {
	return rt.change(ctx, id, func(j *job.Job, now time.Time, p *plan) error {
		if j.Enabled && j.FinishedAt == nil && j.NextRunAt != nil {
			j.PausedFrom = utcPtr(*j.NextRunAt)
		}
		j.Enabled = false
		j.PausedReason = strings.TrimSpace(reason)
		j.NextRunAt = nil
		rt.skipPaused(j, now, p)
		return nil
	})
}

// Resume enables a paused job; its next_run_at becomes the first slot after
// now (the slots passed while paused are recorded skipped, not run). A
// finished job cannot be resumed.
func (rt *Runtime) Resume(ctx context.Context, id string) (job.Job, error) {
	return rt.change(ctx, id, func(j *job.Job, now time.Time, p *plan) error {
		if j.FinishedAt != nil {
			return fmt.Errorf("%w: job %q has finished", ErrInvalidJob, id)
		}
		sched, err := job.ParseSchedule(j, rt.cfg.Location)
		if err != nil {
			return err
		}
		rt.skipPaused(j, now, p)
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
func (rt *Runtime) RecordPaused(ctx context.Context) (int, error) {
	p := &plan{}
	err := rt.store.Update(ctx, func(st *store.State) error {
		p.lines = nil
		now := rt.now()
		for _, j := range st.All() {
			rt.skipPaused(j, now, p)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("agent: record paused slots: %w", err)
	}
	rt.apply(ctx, p)
	return len(p.lines), nil
}

// change applies fn to job id under the lock and writes the ledger lines it
// planned once the change is durable.
func (rt *Runtime) change(ctx context.Context, id string, fn func(j *job.Job, now time.Time, p *plan) error) (job.Job, error) {
	p := &plan{}
	j, err := rt.modify(ctx, id, func(j *job.Job, now time.Time) error {
		p.lines = nil
		return fn(j, now, p)
	})
	if err != nil {
		return j, err
	}
	rt.apply(ctx, p)
	return j, nil
}

// pausedLine is the ledger reason of what a pause skips.
func pausedLine(j *job.Job) string {
	if j.PausedReason != "" {
		return ReasonPaused + ": " + j.PausedReason
	}
	return ReasonPaused
}

// pausedRunID names the record of slot skipped while job was paused; one
// per slot, also across processes.
func pausedRunID(jobID string, slot time.Time) string {
	return "p" + slot.UTC().Format("20060102T150405") + "-" + jobID
}

// skipPaused drops the runs paused job j owes, recording them skipped, and
// records the slots of j from its PausedFrom up to now skipped, at most maxEnumerate one by one (the last line then says
// later ones were skipped too), and moves PausedFrom to the first slot after
// now. The caller holds the store lock.
func (rt *Runtime) skipPaused(j *job.Job, now time.Time, p *plan) {
	if j.Enabled {
		return
	}
	why := pausedLine(j)
	for _, q := range j.Pending {
		p.lines = append(p.lines, rt.entry(j, now, mark{q.RunID, ledger.StateSkipped, q.Slot, Trigger(q.Trigger), why}))
	}
	j.Pending = nil
	if j.PausedFrom == nil || j.PausedFrom.After(now) {
		return
	}
	sched, err := job.ParseSchedule(j, rt.cfg.Location)
	if err != nil {
		return
	}
	slot := *j.PausedFrom
	for n := 1; ; n++ {
		next, ok := sched.Next(slot)
		reason := why
		if n == maxEnumerate && ok && !next.After(now) {
			reason += "; the later slots up to " + now.UTC().Format(time.RFC3339) + " were skipped too"
			next, ok = sched.Next(now)
		}
		p.lines = append(p.lines, rt.entry(j, now, mark{pausedRunID(j.ID, slot), ledger.StateSkipped, slot, TriggerScheduled, reason}))
		if !ok {
			j.PausedFrom = nil
			return
		}
		if slot = next; slot.After(now) {
			break
		}
	}
	j.PausedFrom = utcPtr(slot)
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
