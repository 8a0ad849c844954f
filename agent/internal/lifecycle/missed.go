package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/chronoscron/chronos/agent/internal/notices"
	"github.com/chronoscron/chronos/agent/internal/runs"
	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/notify"
	"github.com/chronoscron/chronos/agent/schedule"
	"github.com/chronoscron/chronos/agent/store"
)

// MissSlots records every slot of job jobID from its next_run_at, which must
// still be from, up to until (and never after now) as missed with reason,
// and moves next_run_at to the first slot after them: the slots passed
// without a fire for a reason NAS gave (the operator stopped the instance,
// the fire was dead-lettered), so they are accounted for and not run. It
// returns how many slots it recorded; 0 when the job no longer waits for
// from (another process, or a fire, handled it). Each slot is recorded once,
// also across processes sharing the home: the lines are written under the
// store lock, skipping any slot the ledger already has a missed line for.
func (rc *Recovery) MissSlots(ctx context.Context, jobID string, from, until time.Time, reason string) (int, error) {
	from = from.UTC()
	recorded, owed := 0, false
	err := rc.Store.Update(ctx, func(st *store.State) error {
		recorded, owed = 0, false
		j := st.Job(jobID)
		if j == nil || !j.Enabled || j.NextRunAt == nil || !j.NextRunAt.Equal(from) {
			return nil
		}
		sched, err := job.ParseSchedule(j, rc.Location)
		if err != nil {
			return fmt.Errorf("job %s: %w", j.ID, err)
		}
		now := rc.now()
		limit := until
		if limit.After(now) {
			limit = now
		}
		if from.After(limit) {
			return nil
		}
		have, err := rc.missedLines(ctx, jobID, from)
		if err != nil {
			return err
		}
		slot, more, done := from, false, false
		for n := 0; !slot.After(limit); n++ {
			if n == MaxEnumerate {
				more = true
				break
			}
			if runID := runs.MissedID(jobID, slot); !have[runID] {
				e := rc.entry(j, now, runs.Mark{RunID: runID, State: ledger.StateMissed, Slot: slot, Trig: runs.Scheduled, Reason: reason})
				if err := rc.Ledger.Append(ctx, e); err != nil {
					return err
				}
				recorded++
				owed = notices.Owe(j, e, notify.Run{}) || owed
			}
			next, ok := sched.Next(slot)
			if !ok {
				done = true
				break
			}
			slot = next
		}
		if more {
			// Past the bound, the rest up to limit goes in one line.
			if err := rc.Ledger.Append(ctx, rc.entry(j, now, runs.Mark{RunID: runs.MissedID(jobID, limit), State: ledger.StateMissed, Slot: limit, Trig: runs.Scheduled, Reason: fmt.Sprintf("%s (and every slot up to here: more than %d)", reason, MaxEnumerate)})); err != nil {
				return err
			}
			recorded++
			slot, done = nextAfter(sched, limit)
		}
		j.UpdatedAt = now.UTC()
		if done {
			j.NextRunAt, j.FinishedAt = nil, utcPtr(now)
			return nil
		}
		j.NextRunAt = utcPtr(slot)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("agent: miss slots: %w", err)
	}
	if owed {
		rc.Notices.HandOverNow(ctx)
	}
	if recorded > 0 {
		rc.Signal()
	}
	return recorded, nil
}

// nextAfter returns the first slot of sched after t; done when there is none.
func nextAfter(sched *schedule.Schedule, t time.Time) (time.Time, bool) {
	n, ok := sched.Next(t)
	return n, !ok
}

// missedLines returns the run ids of the missed lines the ledger holds for
// jobID since a day before from.
func (rc *Recovery) missedLines(ctx context.Context, jobID string, from time.Time) (map[string]bool, error) {
	es, err := rc.Ledger.Entries(ctx, ledger.Filter{JobID: jobID, Since: from.Add(-24 * time.Hour)})
	if err != nil {
		return nil, err
	}
	have := map[string]bool{}
	for _, e := range es {
		if e.State == ledger.StateMissed {
			have[e.RunID] = true
		}
	}
	return have, nil
}

// Overdue is a slot a job waits for that has come.
type Overdue struct {
	JobID string
	// Slot is the job's next_run_at.
	Slot time.Time
	// Late is how long ago the slot was; Grace is how late its fire may
	// still come: the job's misfire grace, after its flexible window when
	// it has one (see Tolerance).
	Late, Grace time.Duration
}

// Backstop hands overdue slots no fire came for to each job's misfire
// policy, as CatchUp does on a wake: decide is asked about every enabled job
// whose next_run_at has come, and returns whether to act and why no fire
// came (the cause starts the reason of every ledger line this writes, as in
// "no fire arrived (NAS unreachable)"). A job whose slot a fire claims
// meanwhile is not touched: the claim's compare-and-set on next_run_at is the
// guard, so a late fire of NAS for a slot the backstop ran answers duplicate.
// It returns how many jobs it handed to their policy.
func (rc *Recovery) Backstop(ctx context.Context, decide func(o Overdue) (cause string, ok bool)) (int, error) {
	if rc.Runs.Closing() {
		return 0, runs.ErrDraining
	}
	p := &Plan{}
	handled := 0
	err := rc.Store.Update(ctx, func(st *store.State) error {
		*p, handled = Plan{}, 0
		now := rc.now()
		// A copy: a refused chain step's job is removed on the way.
		for _, j := range slices.Clone(st.All()) {
			if !j.Enabled || j.FinishedAt != nil || j.NextRunAt == nil || j.NextRunAt.After(now) {
				continue
			}
			sched, err := job.ParseSchedule(j, rc.Location)
			if err != nil {
				rc.Log.Error("job schedule unreadable", "job_id", j.ID, "error", err)
				continue
			}
			cause, ok := decide(Overdue{JobID: j.ID, Slot: *j.NextRunAt, Late: now.Sub(*j.NextRunAt), Grace: job.Tolerance(j, sched)})
			if !ok {
				continue
			}
			rc.admit.reap(j, now, p)
			if err := rc.admit.drain(st, j, now, p); err != nil {
				return err
			}
			before := len(p.lines)
			if err := rc.admit.misfire(st, j, sched, now, p); err != nil {
				return err
			}
			for i := before; i < len(p.lines); i++ {
				e := &p.lines[i]
				if e.JobID != j.ID {
					continue
				}
				if e.Reason == "" {
					e.Reason = fmt.Sprintf("%s: run by the misfire policy (%s)", cause, j.Misfire)
				} else {
					e.Reason = cause + "; " + e.Reason
				}
			}
			handled++
		}
		return nil
	})
	if err != nil {
		rc.unregister(p)
		if errors.Is(err, runs.ErrDraining) {
			return 0, err
		}
		return 0, fmt.Errorf("agent: backstop: %w", err)
	}
	rc.apply(ctx, p)
	return handled, nil
}

// BackstopAt returns the earliest instant at which an enabled job's
// next_run_at will be overdue by more than its grace, counted from the end
// of its flexible window (see Tolerance; the instant may have passed);
// false when no job has a next slot. A reconciler wakes then to see whether
// the slot's fire came.
func (rc *Recovery) BackstopAt(ctx context.Context) (time.Time, bool, error) {
	var best time.Time
	found := false
	err := rc.Store.View(ctx, func(st *store.State) error {
		best, found = time.Time{}, false
		for _, j := range st.All() {
			if !j.Enabled || j.FinishedAt != nil || j.NextRunAt == nil {
				continue
			}
			sched, err := job.ParseSchedule(j, rc.Location)
			if err != nil {
				continue
			}
			at := j.NextRunAt.Add(job.Tolerance(j, sched))
			if !found || at.Before(best) {
				best, found = at, true
			}
		}
		return nil
	})
	if err != nil {
		return time.Time{}, false, fmt.Errorf("agent: backstop at: %w", err)
	}
	return best, found, nil
}
