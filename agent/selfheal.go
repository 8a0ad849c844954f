package agent

import (
	"context"
	"time"

	"github.com/chronoscron/chronos/agent/internal/lifecycle"
)

// FireRefreshed: the fire was a refresh fire, armed at an instant that is
// not one of the job's slots because its next slot lay beyond NAS's horizon
// (see Runtime.Fire). Nothing ran and nothing is in the ledger; the agent
// arms again, nearer to the slot. An HTTP fire endpoint answers 200.
const FireRefreshed FireStatus = "refreshed"

// recoveryOps are the Runtime's operations on what no fire came for: what
// an earlier agent left, overdue, missed and paused slots (package
// lifecycle's Recovery).
type recoveryOps struct{ rt *Runtime }

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
func (o recoveryOps) Backstop(ctx context.Context, decide func(o Overdue) (cause string, ok bool)) (int, error) {
	return o.rt.lc.Recovery.Backstop(ctx, func(l lifecycle.Overdue) (string, bool) { return decide(Overdue(l)) })
}

// BackstopAt returns the earliest instant at which an enabled job's
// next_run_at will be overdue by more than its grace, counted from the end
// of its flexible window (see Tolerance; the instant may have passed);
// false when no job has a next slot. A reconciler wakes then to see whether
// the slot's fire came.
func (o recoveryOps) BackstopAt(ctx context.Context) (time.Time, bool, error) {
	return o.rt.lc.Recovery.BackstopAt(ctx)
}

// MissSlots records every slot of job jobID from its next_run_at, which must
// still be from, up to until (and never after now) as missed with reason,
// and moves next_run_at to the first slot after them: the slots passed
// without a fire for a reason NAS gave (the operator stopped the instance,
// the fire was dead-lettered), so they are accounted for and not run. It
// returns how many slots it recorded; 0 when the job no longer waits for
// from (another process, or a fire, handled it). Each slot is recorded once,
// also across processes sharing the home: the lines are written under the
// store lock, skipping any slot the ledger already has a missed line for.
func (o recoveryOps) MissSlots(ctx context.Context, jobID string, from, until time.Time, reason string) (int, error) {
	return o.rt.lc.Recovery.MissSlots(ctx, jobID, from, until, reason)
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
func (o recoveryOps) Recover(ctx context.Context) error { return o.rt.lc.Recovery.Recover(ctx) }

// CatchUp handles everything due at now for all jobs, in one store update:
// claims whose owners are gone or whose leases expired are reaped; due
// pending runs start; and overdue slots are dealt with by each job's misfire
// policy (a slot within the grace window simply runs late); the slots passed
// while a job is paused are recorded skipped. It never leaves
// an enabled job with a past next_run_at.
func (o recoveryOps) CatchUp(ctx context.Context) error { return o.rt.lc.Recovery.CatchUp(ctx) }

// RecordMissed records a fire NAS reports as failed (dead-lettered) as
// missed in the ledger, once per job and slot, and moves the job past the
// slot if it still waits for it. It reports whether it wrote the line: false
// when the slot was recorded before (NAS reported the fire again) or the
// agent already accounted for it. A nil error means the slot is durably
// accounted for either way.
func (o recoveryOps) RecordMissed(ctx context.Context, jobID string, slot time.Time, reason string) (bool, error) {
	return o.rt.lc.Recovery.RecordMissed(ctx, jobID, slot, reason)
}
