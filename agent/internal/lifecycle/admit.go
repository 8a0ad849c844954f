package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/chronoscron/chronos/agent/internal/runs"
	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/schedule"
	"github.com/chronoscron/chronos/agent/store"
)

// Admission takes fires and manual runs through the claim and the job's
// policies; its decisions are the claims package execute runs.
type Admission struct {
	*env
	gate *Chains
}

// Status says what became of a slot (package agent's FireStatus).
type Status string

// Statuses (see package agent's FireStatus).
const (
	Accepted  Status = "accepted"
	Duplicate Status = "duplicate"
	Gone      Status = "gone"
	Busy      Status = "busy"
	TooEarly  Status = "too_early"
	Refreshed Status = "refreshed"
)

// ClockSkewAllowance is how far ahead of the agent's clock a fired slot may
// be and still run (see package agent).
const ClockSkewAllowance = 30 * time.Second

// Result is the outcome of a fire or a manual run (package agent's
// FireResult).
type Result struct {
	Status     Status
	RunID      string
	RetryAfter time.Duration
	Reason     string
	Skipped    bool
	Queued     bool
}

// drainingResult is the answer to a fire or manual run that arrives while
// the runtime closes: busy, asking the caller to retry in a few seconds.
func drainingResult() Result {
	return Result{Status: Busy, RetryAfter: 5 * time.Second, Reason: runs.ErrDraining.Error()}
}

// Fire claims slot of job jobID: under the store lock it checks that the
// job's next_run_at equals slot, applies the job's policies, records the
// claim and advances next_run_at, then starts the run in the background and
// returns. It answers Accepted (with the run id; Skipped or Queued when a
// policy held the slot back, with the reason), Duplicate when the slot
// was already claimed or has passed, Gone for an unknown job and Busy
// with RetryAfter when it cannot claim now (store busy, shutting down, job
// paused). A slot more than ClockSkewAllowance ahead of the clock is
// TooEarly, with the time until the slot as RetryAfter: nothing runs
// early. A slot equal to the wake time of a pending run (see package agent's Desired)
// starts that run instead. A slot delivered after later slots have passed
// too is decided with them by the job's misfire policy, as CatchUp does.
// A job with a flexible window (Job.Flex) takes its slot's fire anywhere in
// [slot, slot + Flex] as on time: it runs as that slot, and misfire skip's
// grace counts from the window's end (see Tolerance).
// Every outcome but Busy and TooEarly is in the ledger.
func (ad *Admission) Fire(ctx context.Context, jobID string, slot time.Time, trigger runs.Trigger) (Result, error) {
	if trigger == "" {
		trigger = runs.Scheduled
	}
	if ad.Runs.Closing() {
		return drainingResult(), nil
	}
	slot = slot.UTC()
	if ahead := slot.Sub(ad.now()); ahead > ClockSkewAllowance {
		return Result{Status: TooEarly, RetryAfter: ahead,
			Reason: fmt.Sprintf("the slot is %s ahead of the agent's clock; the allowed skew is %s", ahead.Round(time.Second), ClockSkewAllowance)}, nil
	}
	var res Result
	p := &Plan{}
	err := ad.Store.Update(ctx, func(st *store.State) error {
		*p = Plan{}
		res = Result{}
		j := st.Job(jobID)
		if j == nil {
			res = Result{Status: Gone, Reason: fmt.Sprintf("no job %q", jobID)}
			return nil
		}
		now := ad.now()
		ad.reap(j, now, p)
		if !j.Enabled {
			res = Result{Status: Busy, RetryAfter: time.Minute, Reason: pausedReason(j)}
			return nil
		}
		// Owed runs go first (a retry after its backoff, a queued slot whose
		// blocker died).
		if j.NextRunAt == nil || !j.NextRunAt.Equal(slot) {
			var err error
			res, err = ad.fireOffSlot(st, j, admission{slot: slot, trig: trigger}, p)
			return err
		}
		if err := ad.drain(st, j, now, p); err != nil {
			return err
		}
		sched, err := job.ParseSchedule(j, ad.Location)
		if err != nil {
			return fmt.Errorf("agent: job %s: %w", j.ID, err)
		}
		if after, ok := sched.Next(slot); ok && !after.After(now) {
			// Later slots have passed too (NAS delivers this one late, after
			// the agent was down): the misfire policy decides every overdue
			// slot, this one included, so none is dropped unrecorded.
			res, err = ad.fireOverdue(st, j, sched, slot, p)
			return err
		}
		// A fire inside the job's flexible window is on time: the grace
		// counts from the window's end.
		if late := now.Sub(slot); trigger == runs.Scheduled && j.Misfire == job.MisfireSkip && late > job.Tolerance(j, sched) {
			runID := runs.MissedID(j.ID, slot)
			reason := fmt.Sprintf("misfire skip: fired %s late, beyond the grace of %s", late.Round(time.Millisecond), job.Grace(j, sched))
			if j.Flex > 0 {
				reason += fmt.Sprintf(" after the flexible window of %s", j.Flex.Std())
			}
			p.endRun(j, ad.entry(j, now, runs.Mark{RunID: runID, State: ledger.StateMissed, Slot: slot, Trig: trigger, Reason: reason}))
			res = Result{Status: Accepted, RunID: runID, Skipped: true, Reason: reason}
			advance(j, sched, slot, now, notRun)
			return nil
		}
		res, err = ad.admitStep(st, j, sched, admission{slot: slot, trig: trigger}, p)
		if err != nil {
			return err
		}
		advance(j, sched, slot, now, usedBy(res))
		return nil
	})
	if err != nil {
		ad.unregister(p)
		return ad.fireFailed(jobID, slot, err)
	}
	ad.apply(ctx, p)
	if res.Status == Refreshed {
		ad.Signal() // the refresh fire's arm is spent: arm again
	}
	return res, nil
}

// fireFailed answers a fire whose store update failed: busy when the store
// is locked, not writable or the agent is shutting down.
func (ad *Admission) fireFailed(jobID string, slot time.Time, err error) (Result, error) {
	switch {
	case errors.Is(err, store.ErrLockTimeout):
		return Result{Status: Busy, RetryAfter: time.Second, Reason: "store busy"}, nil
	case errors.Is(err, store.ErrUnwritable):
		ad.Log.Warn("fire deferred: the store is not writable", "job_id", jobID, "fire_at", slot, "error", err)
		return Result{Status: Busy, RetryAfter: 5 * time.Second, Reason: "the store is not writable"}, nil
	case errors.Is(err, runs.ErrDraining):
		return drainingResult(), nil
	}
	return Result{}, fmt.Errorf("agent: fire %s: %w", jobID, err)
}

// fireOffSlot answers a fire for a slot that is not j's next_run_at: the
// wake time of a pending run starts it, a refresh point is answered
// refreshed, anything else is a duplicate (recorded). A woken run of a
// chain step obeys its chain (see drain): refused, it is answered skipped.
// The caller holds the store lock.
func (ad *Admission) fireOffSlot(st *store.State, j *job.Job, a admission, p *Plan) (Result, error) {
	slot, trigger, now := a.slot, a.trig, ad.now()
	if q := pendingAt(j, slot); q != nil {
		// A fire armed for a pending run (see package agent's Desired) wakes it.
		if q.NotBefore.After(now) {
			q.NotBefore = now.UTC()
		}
		runID := q.RunID
		before := len(p.lines)
		if err := ad.drain(st, j, now, p); err != nil {
			return Result{}, err
		}
		res := Result{Status: Accepted, RunID: runID, Queued: j.ClaimIndex(runID) < 0, Reason: "woke pending run " + runID}
		for _, e := range p.lines[before:] {
			if e.RunID == runID && e.State == ledger.StateSkipped {
				res.Queued, res.Skipped, res.Reason = false, true, e.Reason
			}
		}
		return res, nil
	}
	if sched, err := job.ParseSchedule(j, ad.Location); err == nil && isRefreshPoint(j, sched, slot) {
		// A refresh fire (NAS's horizon): nothing to run or record;
		// the reconcile it triggers arms nearer to the slot.
		return Result{Status: Refreshed, Reason: fmt.Sprintf("refresh fire: the next slot is %s", j.NextRunAt.Format(time.RFC3339))}, nil
	}
	why := "the job has no next slot"
	if j.FinishedAt != nil {
		why = "the job has finished"
	} else if j.NextRunAt != nil {
		why = fmt.Sprintf("next_run_at is %s", j.NextRunAt.Format(time.RFC3339))
	}
	runID := runs.NewID(now)
	p.lines = append(p.lines, ad.entry(j, now, runs.Mark{RunID: runID, State: ledger.StateDuplicate, Slot: slot, Trig: trigger, Reason: "slot already claimed or passed: " + why}))
	return Result{Status: Duplicate, RunID: runID, Reason: "slot already claimed or passed: " + why}, nil
}

// fireOverdue answers a fire for slot, j's next_run_at, when later slots are
// overdue as well: it applies j's misfire policy to all of them, as CatchUp
// would, and reports what became of slot. The caller holds the store lock.
func (ad *Admission) fireOverdue(st *store.State, j *job.Job, sched *schedule.Schedule, slot time.Time, p *Plan) (Result, error) {
	before := len(p.lines)
	if err := ad.misfire(st, j, sched, ad.now(), p); err != nil {
		return Result{}, err
	}
	res := Result{Status: Accepted, Reason: fmt.Sprintf("overdue with later slots: misfire %s", j.Misfire)}
	for _, e := range p.lines[before:] {
		if e.Slot.Equal(slot) {
			res.RunID, res.Reason = e.RunID, e.Reason
			res.Skipped = e.State == ledger.StateMissed || e.State == ledger.StateSkipped
		}
	}
	return res, nil
}

// RunNow is a manual run (`jobs run`): it goes through the same claim,
// policies and ledger with trigger manual, for a slot at now. It does not
// move next_run_at. forced bypasses the idempotency window. A chain step
// obeys its chain as a fire does: a step whose chain is gone, expired or
// closed does not run. Its skip is recorded (the result names the skipped
// run) and the error wraps chain.ErrExpired or chain.ErrClosed.
func (ad *Admission) RunNow(ctx context.Context, jobID string, forced bool) (Result, error) {
	if ad.Runs.Closing() {
		return drainingResult(), nil
	}
	var res Result
	p := &Plan{}
	err := ad.Store.Update(ctx, func(st *store.State) error {
		*p = Plan{}
		j := st.Job(jobID)
		if j == nil {
			res = Result{Status: Gone, Reason: fmt.Sprintf("no job %q", jobID)}
			return nil
		}
		now := ad.now()
		ad.reap(j, now, p)
		sched, err := job.ParseSchedule(j, ad.Location)
		if err != nil {
			return fmt.Errorf("agent: job %s: %w", j.ID, err)
		}
		res, err = ad.admitStep(st, j, sched, admission{slot: now.UTC(), trig: runs.Manual, forced: forced}, p)
		j.UpdatedAt = now.UTC()
		return err
	})
	if err != nil {
		ad.unregister(p)
		if errors.Is(err, store.ErrLockTimeout) || errors.Is(err, runs.ErrDraining) {
			return Result{Status: Busy, RetryAfter: time.Second, Reason: err.Error()}, nil
		}
		return Result{}, fmt.Errorf("agent: run %s: %w", jobID, err)
	}
	ad.apply(ctx, p)
	if p.refused != nil {
		return res, fmt.Errorf("agent: run %s: %w", jobID, p.refused)
	}
	return res, nil
}

func pausedReason(j *job.Job) string {
	if j.PausedReason != "" {
		return "job paused: " + j.PausedReason
	}
	return "job paused"
}

// admitStep admits a fire or manual run of j like admit, after asking the
// chain gate: a step of a chain that is gone, expired or closed does not
// run (recorded skipped, and see Chains.refuse) and p.refused says why; a
// step that starts is marked running. The caller holds the store lock.
func (ad *Admission) admitStep(st *store.State, j *job.Job, sched *schedule.Schedule, a admission, p *Plan) (Result, error) {
	now := ad.now()
	why, refused := ad.gate.blocked(st, j, now)
	if refused == nil {
		res, err := ad.admit(j, sched, a, now, p)
		if err == nil && res.RunID != "" && !res.Skipped && !res.Queued {
			ad.gate.started(st, j, res.RunID, now)
		}
		return res, err
	}
	runID := runs.NewID(now)
	e := ad.entry(j, now, runs.Mark{RunID: runID, State: ledger.StateSkipped, Slot: a.slot, Trig: a.trig, Reason: why})
	e.Forced = a.forced
	p.lines = append(p.lines, e)
	p.refused = fmt.Errorf("%w; recorded skipped as run %s", refused, runID)
	ad.gate.refuse(st, j, stepRefusal{runID: runID, why: why}, now, p)
	return Result{Status: Accepted, RunID: runID, Skipped: true, Reason: why}, nil
}

// admission asks for a run of slot, by trigger; forced bypasses the
// idempotency window (jobs run --force).
type admission struct {
	slot   time.Time
	trig   runs.Trigger
	forced bool
}

// admit applies the idempotency window and the overlap policy to the run a
// asks for and, if it may run, claims it. The caller holds the store lock.
func (ad *Admission) admit(j *job.Job, sched *schedule.Schedule, a admission, now time.Time, p *Plan) (Result, error) {
	slot, trig, forced := a.slot, a.trig, a.forced
	runID := runs.NewID(now)
	skip := func(reason string) Result {
		e := ad.entry(j, now, runs.Mark{RunID: runID, State: ledger.StateSkipped, Slot: slot, Trig: trig, Reason: reason})
		e.Forced = forced
		p.lines = append(p.lines, e)
		return Result{Status: Accepted, RunID: runID, Skipped: true, Reason: reason}
	}
	if !forced && j.Window != job.WindowNone && j.Window != "" && j.LastSuccessSlot != nil {
		loc := sched.Location()
		if k := job.WindowKey(j.Window, slot, loc); k != "" && k == job.WindowKey(j.Window, *j.LastSuccessSlot, loc) {
			return skip(fmt.Sprintf("window %s %s: run %s already succeeded in it (force to run again)", j.Window, k, j.LastSuccessRun)), nil
		}
	}
	if len(j.Claims) > 0 {
		live := j.Claims[len(j.Claims)-1]
		switch j.Overlap {
		case job.OverlapAllow:
		case job.OverlapQueueOne:
			kept := j.Pending[:0:0]
			for _, q := range j.Pending {
				if q.Cause == job.PendingQueued {
					e := ad.entry(j, now, runs.Mark{RunID: q.RunID, State: ledger.StateSkipped, Slot: q.Slot, Trig: runs.Trigger(q.Trigger), Reason: fmt.Sprintf("overlap queue_one: superseded by run %s for slot %s", runID, slot.Format(time.RFC3339))})
					p.lines = append(p.lines, e)
					continue
				}
				kept = append(kept, q)
			}
			j.Pending = append(kept, job.Pending{RunID: runID, Slot: slot, Trigger: string(trig), Attempt: 1,
				Cause: job.PendingQueued, Forced: forced, Reason: "queued behind run " + live.RunID})
			reason := fmt.Sprintf("overlap queue_one: queued behind run %s", live.RunID)
			e := ad.entry(j, now, runs.Mark{RunID: runID, State: ledger.StateClaimed, Slot: slot, Trig: trig, Reason: reason})
			e.Forced = forced
			p.lines = append(p.lines, e)
			return Result{Status: Accepted, RunID: runID, Queued: true, Reason: reason}, nil
		case job.OverlapReplace:
			for _, c := range j.Claims {
				e := ad.entry(j, now, runs.Mark{RunID: c.RunID, State: ledger.StateInterrupted, Slot: c.Slot, Trig: runs.Trigger(c.Trigger), Reason: fmt.Sprintf("overlap replace: replaced by run %s", runID)})
				e.Owner, e.Token, e.Attempt = c.Owner, c.Token, c.Attempt
				p.endRun(j, e)
				switch ad.judge(&c) {
				case runs.OwnerSelf:
					p.cancels = append(p.cancels, c.RunID)
				case runs.OwnerGone:
					ad.planKill(j, c, p)
				}
			}
			j.Claims = nil
		default:
			return skip(fmt.Sprintf("overlap skip: run %s is still running", live.RunID)), nil
		}
	}
	if err := ad.claim(j, job.Claim{RunID: runID, Slot: slot, Trigger: string(trig), Attempt: 1, Forced: forced}, now, "", p); err != nil {
		return Result{}, err
	}
	return Result{Status: Accepted, RunID: runID}, nil
}

// claim records c on j with a new fencing token and lease, registers the run
// locally, and plans its start.
func (ad *Admission) claim(j *job.Job, c job.Claim, now time.Time, reason string, p *Plan) error {
	c.Owner = ad.Self.String()
	c.OwnerBoot, c.OwnerNS, c.OwnerStart = ad.Where.Boot, ad.Where.NS, ad.SelfStart
	c.ClaimedAt = now.UTC()
	c.LeaseUntil = now.Add(ad.LeaseTTL).UTC()
	c.Slot = c.Slot.UTC()
	c = j.AddClaim(c)
	if err := ad.Runs.Register(j.ID, c); err != nil {
		return err
	}
	p.reg = append(p.reg, c.RunID)
	e := ad.entry(j, now, runs.Mark{RunID: c.RunID, State: ledger.StateClaimed, Slot: c.Slot, Trig: runs.Trigger(c.Trigger), Reason: reason})
	e.Token, e.Attempt, e.Forced = c.Token, c.Attempt, c.Forced
	p.lines = append(p.lines, e)
	p.starts = append(p.starts, runs.Start{Job: j.Clone(), Claim: c})
	return nil
}

// usedBy is the use of a slot whose fire had result res.
func usedBy(res Result) use {
	if res.Skipped {
		return notRun
	}
	return ran
}

// use says whether a handled slot counts against repeat.times.
type use int

// Uses of a slot.
const (
	// notRun: the slot was skipped or missed; it does not count.
	notRun use = iota
	// ran: the slot went to a run; it counts.
	ran
)

// advance moves next_run_at past now (and past slot) after slot was
// handled; a slot that ran counts against repeat.times.
func advance(j *job.Job, sched *schedule.Schedule, slot, now time.Time, u use) {
	j.UpdatedAt = now.UTC()
	if u == ran {
		j.Repeat.Completed++
	}
	if j.Repeat.Times > 0 && j.Repeat.Completed >= j.Repeat.Times {
		j.NextRunAt, j.FinishedAt = nil, utcPtr(now)
		return
	}
	after := now
	if slot.After(after) {
		after = slot
	}
	next, ok := sched.Next(after)
	if !ok {
		j.NextRunAt, j.FinishedAt = nil, utcPtr(now)
		return
	}
	j.NextRunAt = utcPtr(next)
}

// isRefreshPoint reports whether a fire for slot, which is not j's
// next_run_at, is a refresh fire: an instant before the job's next slot that
// is not a slot of its schedule. A genuine fire for a slot that has passed
// is always one of the schedule's slots (it is answered duplicate), and no
// slot lies between the instant next_run_at was computed and next_run_at,
// so a refresh point is never mistaken for one.
func isRefreshPoint(j *job.Job, sched *schedule.Schedule, slot time.Time) bool {
	if j.NextRunAt == nil || j.FinishedAt != nil || !slot.Before(*j.NextRunAt) {
		return false
	}
	n, ok := sched.Next(slot.Add(-time.Nanosecond))
	return !ok || !n.Equal(slot)
}
