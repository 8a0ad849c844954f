package agent

import (
	"context"
	"time"

	"github.com/chronoscron/chronos/agent/internal/lifecycle"
	"github.com/chronoscron/chronos/agent/internal/runs"
)

// Trigger says why a run was started.
type Trigger string

// Triggers.
const (
	TriggerScheduled Trigger = "scheduled"
	TriggerManual    Trigger = "manual"
	TriggerRetry     Trigger = "retry"
	TriggerCatchUp   Trigger = "catch_up"
)

// FireStatus is the answer to a fire.
type FireStatus string

// Fire statuses. An HTTP fire endpoint answers 202 for FireAccepted, 200 for
// FireDuplicate and FireGone, 503 with Retry-After for FireBusy and 425 with
// Retry-After for FireTooEarly.
const (
	// FireAccepted: the slot is this process's responsibility now. RunID
	// names the run; Skipped says the policies recorded it without running
	// (the reason is in Reason and in the ledger).
	FireAccepted FireStatus = "accepted"
	// FireDuplicate: the slot was already claimed or has passed.
	FireDuplicate FireStatus = "duplicate"
	// FireGone: no such job.
	FireGone FireStatus = "gone"
	// FireBusy: cannot claim now; try again after RetryAfter.
	FireBusy FireStatus = "busy"
	// FireTooEarly: the slot is more than ClockSkewAllowance ahead of the
	// agent's clock; nothing was claimed or recorded. RetryAfter is the
	// time until the slot.
	FireTooEarly FireStatus = "too_early"
)

// ClockSkewAllowance is how far ahead of the agent's clock a fired slot may
// be and still run: the clock skew the fire token's time checks allow too.
// A fire for a slot further ahead is refused with FireTooEarly, so nothing
// runs early.
const ClockSkewAllowance = lifecycle.ClockSkewAllowance

// FireResult is the outcome of Fire or RunNow.
type FireResult struct {
	// Status says what became of the slot.
	Status FireStatus
	// RunID names the run the slot went to, when there is one.
	RunID string
	// RetryAfter is how long to wait before firing again; set with FireBusy.
	RetryAfter time.Duration
	// Reason explains the status in words (for logs and the ledger); it may
	// be empty.
	Reason string
	// Skipped is set with FireAccepted when the slot was consumed without a
	// run (overlap skip, idempotency window, misfire skip).
	Skipped bool
	// Queued is set with FireAccepted when the run waits behind a live one
	// (overlap queue_one).
	Queued bool
}

// Desired is one fire the agent wants armed: an enabled job's future
// next_run_at.
type Desired struct {
	// JobID names the job.
	JobID string
	// FireAt is the slot to arm: the job's next_run_at.
	FireAt time.Time
	// Flex is the job's flexible window when FireAt is its next_run_at
	// (not for the wake of a pending run): NAS may deliver the fire up to
	// Flex after FireAt. 0: none.
	Flex time.Duration
}

// fireResult is r as package agent answers it.
func fireResult(r lifecycle.Result) FireResult {
	return FireResult{Status: FireStatus(r.Status), RunID: r.RunID, RetryAfter: r.RetryAfter, Reason: r.Reason,
		Skipped: r.Skipped, Queued: r.Queued}
}

// Fire claims slot of job jobID: under the store lock it checks that the
// job's next_run_at equals slot, applies the job's policies, records the
// claim and advances next_run_at, then starts the run in the background and
// returns. It answers FireAccepted (with the run id; Skipped or Queued when a
// policy held the slot back, with the reason), FireDuplicate when the slot
// was already claimed or has passed, FireGone for an unknown job and FireBusy
// with RetryAfter when it cannot claim now (store busy, shutting down, job
// paused). A slot more than ClockSkewAllowance ahead of the clock is
// FireTooEarly, with the time until the slot as RetryAfter: nothing runs
// early. A slot equal to the wake time of a pending run (see Desired)
// starts that run instead. A slot delivered after later slots have passed
// too is decided with them by the job's misfire policy, as CatchUp does.
// A job with a flexible window (Job.Flex) takes its slot's fire anywhere in
// [slot, slot + Flex] as on time: it runs as that slot, and misfire skip's
// grace counts from the window's end (see Tolerance).
// Every outcome but FireBusy and FireTooEarly is in the ledger.
func (rt *Runtime) Fire(ctx context.Context, jobID string, slot time.Time, trigger Trigger) (FireResult, error) {
	res, err := rt.lc.Admission.Fire(ctx, jobID, slot, runs.Trigger(trigger))
	return fireResult(res), err
}

// RunNow is a manual run (`jobs run`): it goes through the same claim,
// policies and ledger with trigger manual, for a slot at now. It does not
// move next_run_at. o.Force bypasses the idempotency window. A chain step
// obeys its chain as a fire does: a step whose chain is gone, expired or
// closed does not run. Its skip is recorded (the result names the skipped
// run) and the error wraps chain.ErrExpired or chain.ErrClosed.
func (rt *Runtime) RunNow(ctx context.Context, jobID string, o RunOptions) (FireResult, error) {
	res, err := rt.lc.Admission.RunNow(ctx, jobID, o.Force)
	return fireResult(res), err
}
