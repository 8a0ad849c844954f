package lifecycle

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/chronoscron/chronos/agent/internal/notices"
	"github.com/chronoscron/chronos/agent/internal/runs"
	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/notify"
	"github.com/chronoscron/chronos/agent/store"
)

// Recovery takes over what an earlier agent left and decides the slots
// no fire came for: overdue, missed and paused ones.
type Recovery struct {
	*env
	admit *Admission
	gate  *Chains
}

// Recover takes over what died with an earlier agent, before this one takes
// fires: runs whose owner is provably gone (on this host: its process is
// not running, or its pid now runs another process, or it ran before the
// last boot) are recorded interrupted, what is left of their processes is
// killed, and each job's on_interrupt policy is applied at once; under
// retry a new attempt starts now, with a new fencing token. Claims whose
// lease expired are reaped too, and pending runs that are due start. Unlike
// CatchUp it leaves overdue slots alone (a provider decides those). The
// serving agent calls it when it starts.
func (rc *Recovery) Recover(ctx context.Context) error {
	if rc.Runs.Closing() {
		return runs.ErrDraining
	}
	p := &Plan{}
	err := rc.Store.Update(ctx, func(st *store.State) error {
		*p = Plan{}
		now := rc.now()
		// A copy: a refused chain step's job is removed on the way.
		for _, j := range slices.Clone(st.All()) {
			if err := rc.recoverJob(st, j, now, p); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		rc.unregister(p)
		return fmt.Errorf("agent: recover: %w", err)
	}
	rc.apply(ctx, p)
	return nil
}

// recoverJob reaps j's claims whose owners are gone or whose leases expired,
// records the slots it let pass while paused, and starts its due pending
// runs: what Recover and CatchUp do first for every job.
func (rc *Recovery) recoverJob(st *store.State, j *job.Job, now time.Time, p *Plan) error {
	rc.admit.reap(j, now, p)
	rc.SkipPaused(j, now, p)
	return rc.admit.drain(st, j, now, p)
}

// CatchUp handles everything due at now for all jobs, in one store update:
// claims whose owners are gone or whose leases expired are reaped; due
// pending runs start; and overdue slots are dealt with by each job's misfire
// policy (a slot within the grace window simply runs late); the slots passed
// while a job is paused are recorded skipped. It never leaves
// an enabled job with a past next_run_at.
func (rc *Recovery) CatchUp(ctx context.Context) error {
	if rc.Runs.Closing() {
		return runs.ErrDraining
	}
	// Chains that expired meanwhile close first: their overdue steps must
	// not run.
	if _, err := rc.gate.Sweep(ctx); err != nil {
		return err
	}
	p := &Plan{}
	err := rc.Store.Update(ctx, func(st *store.State) error {
		*p = Plan{}
		now := rc.now()
		// A copy: a refused chain step's job is removed on the way.
		for _, j := range slices.Clone(st.All()) {
			if err := rc.recoverJob(st, j, now, p); err != nil {
				return err
			}
			if !j.Enabled || j.NextRunAt == nil || j.NextRunAt.After(now) {
				continue
			}
			sched, err := job.ParseSchedule(j, rc.Location)
			if err != nil {
				rc.Log.Error("job schedule unreadable", "job_id", j.ID, "error", err)
				continue
			}
			if err := rc.admit.misfire(st, j, sched, now, p); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		rc.unregister(p)
		return fmt.Errorf("agent: catch up: %w", err)
	}
	rc.apply(ctx, p)
	return nil
}

// RecordMissed records a fire NAS reports as failed (dead-lettered) as
// missed in the ledger, once per job and slot, and moves the job past the
// slot if it still waits for it. It reports whether it wrote the line: false
// when the slot was recorded before (NAS reported the fire again) or the
// agent already accounted for it. A nil error means the slot is durably
// accounted for either way.
func (rc *Recovery) RecordMissed(ctx context.Context, jobID string, slot time.Time, reason string) (bool, error) {
	slot = slot.UTC()
	runID := runs.MissedID(jobID, slot)
	var line *ledger.Entry
	overdue, notified := false, false
	err := rc.Store.Update(ctx, func(st *store.State) error {
		line, overdue, notified = nil, false, false
		has, err := rc.Ledger.Has(ctx, runID, slot.Add(-24*time.Hour))
		if err != nil {
			return err
		}
		if has || rc.Lines.HasRun(runID) {
			return nil
		}
		now := rc.now()
		j := st.Job(jobID)
		owed := j != nil && j.NextRunAt != nil && j.NextRunAt.Equal(slot)
		if j != nil && !owed {
			// The slot is no longer owed: if this agent already accounted
			// for it (ran it, or its misfire policy decided it), the
			// upstream failure adds nothing and a second line would say the
			// slot was handled twice.
			handled, err := rc.slotHandled(ctx, jobID, slot)
			if err != nil {
				return err
			}
			if handled {
				return nil
			}
		}
		if j == nil {
			j = &job.Job{ID: jobID}
		} else if owed {
			if sched, err := job.ParseSchedule(j, rc.Location); err == nil {
				// Move to the slot after the failed one, not past now: later
				// slots that are overdue too are the misfire policy's to
				// decide (CatchUp below), never skipped in silence.
				advance(j, sched, slot, slot, notRun)
				j.UpdatedAt = now.UTC()
				if j.FinishedAt != nil {
					j.FinishedAt = utcPtr(now)
				}
				overdue = j.Enabled && j.NextRunAt != nil && !j.NextRunAt.After(now)
			}
		}
		e := rc.entry(j, now, runs.Mark{RunID: runID, State: ledger.StateMissed, Slot: slot, Trig: runs.Scheduled, Reason: "fire failed upstream: " + strings.TrimSpace(reason)})
		if err := rc.Ledger.Append(ctx, e); err != nil {
			return err
		}
		line = &e
		notified = notices.Owe(j, e, notify.Run{})
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("agent: record missed: %w", err)
	}
	if notified {
		rc.Notices.HandOverNow(ctx)
	}
	if line != nil {
		rc.Signal()
	}
	if overdue {
		if err := rc.CatchUp(ctx); err != nil {
			return line != nil, fmt.Errorf("agent: record missed: %w", err)
		}
	}
	return line != nil, nil
}

// slotHandled reports whether the ledger holds a line for slot of jobID.
func (rc *Recovery) slotHandled(ctx context.Context, jobID string, slot time.Time) (bool, error) {
	es, err := rc.Ledger.Entries(ctx, ledger.Filter{JobID: jobID, Since: slot.Add(-24 * time.Hour)})
	if err != nil {
		return false, err
	}
	for _, e := range es {
		if e.Slot.Equal(slot) {
			return true, nil
		}
	}
	return rc.Lines.HasSlot(jobID, slot), nil
}
