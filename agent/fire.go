package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/notify"
	"github.com/chronoscron/chronos/agent/runner"
	"github.com/chronoscron/chronos/agent/schedule"
	"github.com/chronoscron/chronos/agent/store"
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
const ClockSkewAllowance = 30 * time.Second

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

// errDraining refuses new claims while Close runs.
var errDraining = errors.New("agent is shutting down")

// drainingResult is the answer to a fire or manual run that arrives while
// Close runs: busy, asking the caller to retry in a few seconds.
func drainingResult() FireResult {
	return FireResult{Status: FireBusy, RetryAfter: 5 * time.Second, Reason: errDraining.Error()}
}

// plan collects what one store update decided; it is carried out after the
// update is durable.
type plan struct {
	lines   []ledger.Entry
	starts  []startReq
	cancels []string  // local run ids to stop (replaced)
	reg     []string  // run ids registered during the update
	kills   []killReq // what is left of runs whose owner died
	owed    bool      // notifications joined a job's outbound rows
	refused error     // why a chain step was not run (see admitStep)
	// orphans are fanout parents recorded interrupted without being
	// resumed: their children and reducer left running end too.
	orphans []startReq
}

// endRun puts line e, which ends a run of j without it running to an
// answer (missed, interrupted), in p and stores the notifications it owes
// on j, in the same write.
func (rt *Runtime) endRun(j *job.Job, e ledger.Entry, p *plan) {
	p.lines = append(p.lines, e)
	if rt.owe(j, e, notify.Run{}) {
		p.owed = true
	}
}

// killReq names a run of a dead owner on this host whose processes must
// be killed before anything else happens to its slot.
type killReq struct {
	jobID, runID string
	procs        []runner.Process
}

type startReq struct {
	job   job.Job
	claim job.Claim
	// announced is set once the run's running line is written, with the
	// lines of the plan that started it.
	announced bool
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
	if trigger == "" {
		trigger = TriggerScheduled
	}
	if rt.closing.Load() {
		return drainingResult(), nil
	}
	slot = slot.UTC()
	if ahead := slot.Sub(rt.now()); ahead > ClockSkewAllowance {
		return FireResult{Status: FireTooEarly, RetryAfter: ahead,
			Reason: fmt.Sprintf("the slot is %s ahead of the agent's clock; the allowed skew is %s", ahead.Round(time.Second), ClockSkewAllowance)}, nil
	}
	var res FireResult
	p := &plan{}
	err := rt.store.Update(ctx, func(st *store.State) error {
		*p = plan{}
		res = FireResult{}
		j := st.Job(jobID)
		if j == nil {
			res = FireResult{Status: FireGone, Reason: fmt.Sprintf("no job %q", jobID)}
			return nil
		}
		now := rt.now()
		rt.reap(j, now, p)
		if !j.Enabled {
			res = FireResult{Status: FireBusy, RetryAfter: time.Minute, Reason: pausedReason(j)}
			return nil
		}
		// Owed runs go first (a retry after its backoff, a queued slot whose
		// blocker died).
		if j.NextRunAt == nil || !j.NextRunAt.Equal(slot) {
			var err error
			res, err = rt.fireOffSlot(st, j, admission{slot: slot, trig: trigger}, p)
			return err
		}
		if err := rt.drain(st, j, now, p); err != nil {
			return err
		}
		sched, err := job.ParseSchedule(j, rt.cfg.Location)
		if err != nil {
			return fmt.Errorf("agent: job %s: %w", j.ID, err)
		}
		if after, ok := sched.Next(slot); ok && !after.After(now) {
			// Later slots have passed too (NAS delivers this one late, after
			// the agent was down): the misfire policy decides every overdue
			// slot, this one included, so none is dropped unrecorded.
			res, err = rt.fireOverdue(st, j, sched, slot, p)
			return err
		}
		// A fire inside the job's flexible window is on time: the grace
		// counts from the window's end.
		if late := now.Sub(slot); trigger == TriggerScheduled && j.Misfire == job.MisfireSkip && late > job.Tolerance(j, sched) {
			runID := missedRunID(j.ID, slot)
			reason := fmt.Sprintf("misfire skip: fired %s late, beyond the grace of %s", late.Round(time.Millisecond), job.Grace(j, sched))
			if j.Flex > 0 {
				reason += fmt.Sprintf(" after the flexible window of %s", j.Flex.Std())
			}
			rt.endRun(j, rt.entry(j, now, mark{runID, ledger.StateMissed, slot, trigger, reason}), p)
			res = FireResult{Status: FireAccepted, RunID: runID, Skipped: true, Reason: reason}
			rt.advance(j, sched, slot, now, notRun)
			return nil
		}
		res, err = rt.admitStep(st, j, sched, admission{slot: slot, trig: trigger}, p)
		if err != nil {
			return err
		}
		rt.advance(j, sched, slot, now, usedBy(res))
		return nil
	})
	if err != nil {
		rt.unregister(p)
		return rt.fireFailed(jobID, slot, err)
	}
	rt.apply(ctx, p)
	if res.Status == FireRefreshed {
		rt.signal() // the refresh fire's arm is spent: arm again
	}
	return res, nil
}

// fireFailed answers a fire whose store update failed: busy when the store
// is locked, not writable or the agent is shutting down.
func (rt *Runtime) fireFailed(jobID string, slot time.Time, err error) (FireResult, error) {
	switch {
	case errors.Is(err, store.ErrLockTimeout):
		return FireResult{Status: FireBusy, RetryAfter: time.Second, Reason: "store busy"}, nil
	case errors.Is(err, store.ErrUnwritable):
		rt.log.Warn("fire deferred: the store is not writable", "job_id", jobID, "fire_at", slot, "error", err)
		return FireResult{Status: FireBusy, RetryAfter: 5 * time.Second, Reason: "the store is not writable"}, nil
	case errors.Is(err, errDraining):
		return drainingResult(), nil
	}
	return FireResult{}, fmt.Errorf("agent: fire %s: %w", jobID, err)
}

// fireOffSlot answers a fire for a slot that is not j's next_run_at: the
// wake time of a pending run starts it, a refresh point is answered
// refreshed, anything else is a duplicate (recorded). A woken run of a
// chain step obeys its chain (see drain): refused, it is answered skipped.
// The caller holds the store lock.
func (rt *Runtime) fireOffSlot(st *store.State, j *job.Job, a admission, p *plan) (FireResult, error) {
	slot, trigger, now := a.slot, a.trig, rt.now()
	if q := pendingAt(j, slot); q != nil {
		// A fire armed for a pending run (see Desired) wakes it.
		if q.NotBefore.After(now) {
			q.NotBefore = now.UTC()
		}
		runID := q.RunID
		before := len(p.lines)
		if err := rt.drain(st, j, now, p); err != nil {
			return FireResult{}, err
		}
		res := FireResult{Status: FireAccepted, RunID: runID, Queued: j.ClaimIndex(runID) < 0, Reason: "woke pending run " + runID}
		for _, e := range p.lines[before:] {
			if e.RunID == runID && e.State == ledger.StateSkipped {
				res.Queued, res.Skipped, res.Reason = false, true, e.Reason
			}
		}
		return res, nil
	}
	if sched, err := job.ParseSchedule(j, rt.cfg.Location); err == nil && isRefreshPoint(j, sched, slot) {
		// A refresh fire (NAS's horizon): nothing to run or record;
		// the reconcile it triggers arms nearer to the slot.
		return FireResult{Status: FireRefreshed, Reason: fmt.Sprintf("refresh fire: the next slot is %s", j.NextRunAt.Format(time.RFC3339))}, nil
	}
	why := "the job has no next slot"
	if j.FinishedAt != nil {
		why = "the job has finished"
	} else if j.NextRunAt != nil {
		why = fmt.Sprintf("next_run_at is %s", j.NextRunAt.Format(time.RFC3339))
	}
	runID := newRunID(now)
	p.lines = append(p.lines, rt.entry(j, now, mark{runID, ledger.StateDuplicate, slot, trigger, "slot already claimed or passed: " + why}))
	return FireResult{Status: FireDuplicate, RunID: runID, Reason: "slot already claimed or passed: " + why}, nil
}

// fireOverdue answers a fire for slot, j's next_run_at, when later slots are
// overdue as well: it applies j's misfire policy to all of them, as CatchUp
// would, and reports what became of slot. The caller holds the store lock.
func (rt *Runtime) fireOverdue(st *store.State, j *job.Job, sched *schedule.Schedule, slot time.Time, p *plan) (FireResult, error) {
	before := len(p.lines)
	if err := rt.misfire(st, j, sched, rt.now(), p); err != nil {
		return FireResult{}, err
	}
	res := FireResult{Status: FireAccepted, Reason: fmt.Sprintf("overdue with later slots: misfire %s", j.Misfire)}
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
// move next_run_at. o.Force bypasses the idempotency window. A chain step
// obeys its chain as a fire does: a step whose chain is gone, expired or
// closed does not run. Its skip is recorded (the result names the skipped
// run) and the error wraps chain.ErrExpired or chain.ErrClosed.
func (rt *Runtime) RunNow(ctx context.Context, jobID string, o RunOptions) (FireResult, error) {
	if rt.closing.Load() {
		return drainingResult(), nil
	}
	var res FireResult
	p := &plan{}
	err := rt.store.Update(ctx, func(st *store.State) error {
		*p = plan{}
		j := st.Job(jobID)
		if j == nil {
			res = FireResult{Status: FireGone, Reason: fmt.Sprintf("no job %q", jobID)}
			return nil
		}
		now := rt.now()
		rt.reap(j, now, p)
		sched, err := job.ParseSchedule(j, rt.cfg.Location)
		if err != nil {
			return fmt.Errorf("agent: job %s: %w", j.ID, err)
		}
		res, err = rt.admitStep(st, j, sched, admission{slot: now.UTC(), trig: TriggerManual, forced: o.Force}, p)
		j.UpdatedAt = now.UTC()
		return err
	})
	if err != nil {
		rt.unregister(p)
		if errors.Is(err, store.ErrLockTimeout) || errors.Is(err, errDraining) {
			return FireResult{Status: FireBusy, RetryAfter: time.Second, Reason: err.Error()}, nil
		}
		return FireResult{}, fmt.Errorf("agent: run %s: %w", jobID, err)
	}
	rt.apply(ctx, p)
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

// mark is what a ledger line says about one run of a job.
type mark struct {
	runID  string
	state  ledger.State
	slot   time.Time
	trig   Trigger
	reason string
}

// entry builds the ledger line l of job j, written at now.
func (rt *Runtime) entry(j *job.Job, now time.Time, l mark) ledger.Entry {
	return ledger.Entry{
		Time:       now.UTC(),
		RunID:      l.runID,
		JobID:      j.ID,
		State:      l.state,
		Slot:       l.slot.UTC(),
		Trigger:    string(l.trig),
		Attempt:    1,
		LatenessMS: now.Sub(l.slot).Milliseconds(),
		Reason:     l.reason,
		Owner:      rt.self.String(),
		Runner:     j.Payload.Kind,
		Role:       kindRole(j),
		Chain:      jobChainRef(j),
	}
}

// admission asks for a run of slot, by trigger; forced bypasses the
// idempotency window (jobs run --force).
type admission struct {
	slot   time.Time
	trig   Trigger
	forced bool
}

// admit applies the idempotency window and the overlap policy to the run a
// asks for and, if it may run, claims it. The caller holds the store lock.
func (rt *Runtime) admit(j *job.Job, sched *schedule.Schedule, a admission, now time.Time, p *plan) (FireResult, error) {
	slot, trig, forced := a.slot, a.trig, a.forced
	runID := newRunID(now)
	skip := func(reason string) FireResult {
		e := rt.entry(j, now, mark{runID, ledger.StateSkipped, slot, trig, reason})
		e.Forced = forced
		p.lines = append(p.lines, e)
		return FireResult{Status: FireAccepted, RunID: runID, Skipped: true, Reason: reason}
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
					e := rt.entry(j, now, mark{q.RunID, ledger.StateSkipped, q.Slot, Trigger(q.Trigger), fmt.Sprintf("overlap queue_one: superseded by run %s for slot %s", runID, slot.Format(time.RFC3339))})
					p.lines = append(p.lines, e)
					continue
				}
				kept = append(kept, q)
			}
			j.Pending = append(kept, job.Pending{RunID: runID, Slot: slot, Trigger: string(trig), Attempt: 1,
				Cause: job.PendingQueued, Forced: forced, Reason: "queued behind run " + live.RunID})
			reason := fmt.Sprintf("overlap queue_one: queued behind run %s", live.RunID)
			e := rt.entry(j, now, mark{runID, ledger.StateClaimed, slot, trig, reason})
			e.Forced = forced
			p.lines = append(p.lines, e)
			return FireResult{Status: FireAccepted, RunID: runID, Queued: true, Reason: reason}, nil
		case job.OverlapReplace:
			for _, c := range j.Claims {
				e := rt.entry(j, now, mark{c.RunID, ledger.StateInterrupted, c.Slot, Trigger(c.Trigger), fmt.Sprintf("overlap replace: replaced by run %s", runID)})
				e.Owner, e.Token, e.Attempt = c.Owner, c.Token, c.Attempt
				rt.endRun(j, e, p)
				switch rt.judge(&c) {
				case store.OwnerSelf:
					p.cancels = append(p.cancels, c.RunID)
				case store.OwnerGone:
					rt.planKill(j, c, p)
				}
			}
			j.Claims = nil
		default:
			return skip(fmt.Sprintf("overlap skip: run %s is still running", live.RunID)), nil
		}
	}
	if err := rt.claim(j, job.Claim{RunID: runID, Slot: slot, Trigger: string(trig), Attempt: 1, Forced: forced}, now, "", p); err != nil {
		return FireResult{}, err
	}
	return FireResult{Status: FireAccepted, RunID: runID}, nil
}

// claim records c on j with a new fencing token and lease, registers the run
// locally, and plans its start.
func (rt *Runtime) claim(j *job.Job, c job.Claim, now time.Time, reason string, p *plan) error {
	c.Owner = rt.self.String()
	c.OwnerBoot, c.OwnerNS, c.OwnerStart = rt.where.Boot, rt.where.NS, rt.selfStart
	c.ClaimedAt = now.UTC()
	c.LeaseUntil = now.Add(rt.cfg.LeaseTTL).UTC()
	c.Slot = c.Slot.UTC()
	c = j.AddClaim(c)
	if err := rt.register(j.ID, c); err != nil {
		return err
	}
	p.reg = append(p.reg, c.RunID)
	e := rt.entry(j, now, mark{c.RunID, ledger.StateClaimed, c.Slot, Trigger(c.Trigger), reason})
	e.Token, e.Attempt, e.Forced = c.Token, c.Attempt, c.Forced
	p.lines = append(p.lines, e)
	p.starts = append(p.starts, startReq{job: j.Clone(), claim: c})
	return nil
}

// usedBy is the use of a slot whose fire had result res.
func usedBy(res FireResult) use {
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
func (rt *Runtime) advance(j *job.Job, sched *schedule.Schedule, slot, now time.Time, u use) {
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

// reap releases claims whose owner is provably gone or, for an owner that
// cannot be judged (another host), whose lease expired, recording them
// interrupted; what is left of a dead owner's processes is killed first
// (see apply). A claim of this process is never reaped while the run is
// this process's (running, or its result held until durable), nor one of a
// live owner on this host, whatever its lease says. Under on_interrupt
// retry the slot is owed again as a pending retry: at once when the owner
// is provably gone, after the backoff when only its lease expired. The
// caller holds the store lock.
func (rt *Runtime) reap(j *job.Job, now time.Time, p *plan) {
	if len(j.Claims) == 0 {
		return
	}
	kept := make([]job.Claim, 0, len(j.Claims))
	for _, c := range j.Claims {
		var why string
		gone := false
		switch rt.judge(&c) {
		case store.OwnerSelf:
			if rt.isActive(c.RunID, c.Token) {
				kept = append(kept, c)
				continue
			}
			why = "this process no longer runs it"
		case store.OwnerAlive:
			kept = append(kept, c)
			continue
		case store.OwnerGone:
			why = fmt.Sprintf("owner %s is gone", c.Owner)
			gone = true
			rt.planKill(j, c, p)
		default:
			if !now.After(c.LeaseUntil) {
				kept = append(kept, c)
				continue
			}
			why = fmt.Sprintf("lease of owner %s expired at %s", c.Owner, c.LeaseUntil.Format(time.RFC3339))
		}
		reason := "interrupted: " + why
		if j.OnInterrupt == job.InterruptRetry || rt.resumable(j, c) {
			if c.Attempt < j.Retry.Attempts() {
				d := j.Retry.Delay(c.Attempt + 1)
				if gone {
					d = 0
				}
				j.Pending = append(j.Pending, job.Pending{RunID: c.RunID, Slot: c.Slot, Trigger: string(TriggerRetry),
					Attempt: c.Attempt + 1, NotBefore: now.Add(d).UTC(), Cause: job.PendingRetry, Forced: c.Forced,
					Reason: fmt.Sprintf("retry %d/%d after interruption", c.Attempt+1, j.Retry.Attempts())})
				if d == 0 {
					reason += fmt.Sprintf("; retry %d/%d now", c.Attempt+1, j.Retry.Attempts())
				} else {
					reason += fmt.Sprintf("; retry %d/%d in %s", c.Attempt+1, j.Retry.Attempts(), d)
				}
			} else {
				reason += fmt.Sprintf("; no retry left (%d attempts)", c.Attempt)
				if j.JobKind == job.JobKindFanout {
					p.orphans = append(p.orphans, startReq{job: *j, claim: c})
				}
			}
		}
		j.LastStatus, j.LastError = job.StatusInterrupted, reason
		j.FailureStreak++
		e := rt.entry(j, now, mark{c.RunID, ledger.StateInterrupted, c.Slot, Trigger(c.Trigger), reason})
		e.Owner, e.Token, e.Attempt, e.Forced = c.Owner, c.Token, c.Attempt, c.Forced
		rt.endRun(j, e, p)
	}
	j.Claims = kept
}

// planKill plans to kill what is left of claim c of a dead owner on this
// host. Processes of another boot are long gone, and those of another pid
// namespace are not ours to find: neither is looked for.
func (rt *Runtime) planKill(j *job.Job, c job.Claim, p *plan) {
	if c.OwnerBoot != "" && rt.where.Boot != "" && c.OwnerBoot != rt.where.Boot ||
		c.OwnerNS != "" && rt.where.NS != "" && c.OwnerNS != rt.where.NS {
		return
	}
	p.kills = append(p.kills, killReq{jobID: j.ID, runID: c.RunID, procs: c.Procs})
}

// killLeftovers kills what is left of runs whose owner died: their recorded
// processes, their process group and every process naming the run in its
// environment (see runner.KillRun).
func (rt *Runtime) killLeftovers(ctx context.Context, kills []killReq) {
	for _, k := range kills {
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		n, err := runner.KillRun(kctx, k.runID, k.procs)
		cancel()
		switch {
		case err != nil:
			rt.log.Error("killing what is left of an interrupted run failed", "job_id", k.jobID, "run_id", k.runID, "killed", n, "error", err)
		case n > 0:
			rt.log.Warn("killed what was left of an interrupted run", "job_id", k.jobID, "run_id", k.runID, "processes", n)
		}
	}
}

// drain starts the first due pending run of j (a queued slot, a retry, a
// catch-up) when the overlap policy lets it. A chain step's run obeys its
// chain as a fire does (see admitStep): when the chain is gone, expired or
// closed, the step's pending runs are recorded skipped instead and dropped
// (see refuseStep); a run that starts marks the step running. The caller
// holds the store lock.
func (rt *Runtime) drain(st *store.State, j *job.Job, now time.Time, p *plan) error {
	if !j.Enabled || len(j.Pending) == 0 {
		return nil
	}
	if len(j.Claims) > 0 && j.Overlap != job.OverlapAllow {
		return nil
	}
	for i, q := range j.Pending {
		if q.NotBefore.After(now) {
			continue
		}
		if j.Chain != nil {
			if why, refused := stepBlocked(j, st.Chain(j.Chain.ChainID), now); refused != nil {
				rt.refuseStep(st, j, stepRefusal{runID: q.RunID, why: why}, now, p)
				return nil
			}
		}
		j.Pending = append(j.Pending[:i:i], j.Pending[i+1:]...)
		if err := rt.claim(j, job.Claim{RunID: q.RunID, Slot: q.Slot, Trigger: q.Trigger, Attempt: q.Attempt, Forced: q.Forced}, now, q.Reason, p); err != nil {
			return err
		}
		if c := chainOf(st, j); c != nil {
			c.StepStarted(j.ID, q.RunID, now)
		}
		return nil
	}
	return nil
}

// pendingAt returns the pending run of j whose wake time is slot, or nil.
func pendingAt(j *job.Job, slot time.Time) *job.Pending {
	for i := range j.Pending {
		if !j.Pending[i].NotBefore.IsZero() && j.Pending[i].NotBefore.Equal(slot) {
			return &j.Pending[i]
		}
	}
	return nil
}

// slotHandled reports whether the ledger holds a line for slot of jobID.
func (rt *Runtime) slotHandled(ctx context.Context, jobID string, slot time.Time) (bool, error) {
	es, err := rt.ledger.Entries(ctx, ledger.Filter{JobID: jobID, Since: slot.Add(-24 * time.Hour)})
	if err != nil {
		return false, err
	}
	for _, e := range es {
		if e.Slot.Equal(slot) {
			return true, nil
		}
	}
	return rt.heldSlot(jobID, slot), nil
}

// missedRunID is the run id of a missed slot: fixed per job and slot, so
// recording it twice is detectable.
func missedRunID(jobID string, slot time.Time) string {
	return "m" + slot.UTC().Format("20060102T150405") + "-" + jobID
}

// apply carries out a committed plan: the processes of runs whose owner
// died are killed first (before their slot can run again), then the ledger
// lines are written (or held until they can be), then cancellations and
// starts.
func (rt *Runtime) apply(ctx context.Context, p *plan) {
	rt.killLeftovers(ctx, p.kills)
	for _, o := range p.orphans {
		rt.endSteps(ctx, &o.job, o.claim)
	}
	lines := p.lines
	for i, s := range p.starts {
		// A run that starts now has its running line written with the
		// plan's: one write and one sync for a fire's claim and its start.
		if rt.isActive(s.claim.RunID, s.claim.Token) {
			lines = append(lines, rt.runningLine(s))
			p.starts[i].announced = true
		}
	}
	rt.record(lines...)
	if p.owed {
		rt.handOverNow(ctx)
	}
	for _, id := range p.cancels {
		rt.cancelRun(id, errReplaced)
	}
	for _, s := range p.starts {
		rt.start(s)
	}
	if len(p.lines) > 0 || len(p.starts) > 0 {
		rt.signal()
	}
}

var errReplaced = errors.New("replaced by a newer run (overlap replace)")

// Recover takes over what died with an earlier agent, before this one takes
// fires: runs whose owner is provably gone (on this host: its process is
// not running, or its pid now runs another process, or it ran before the
// last boot) are recorded interrupted, what is left of their processes is
// killed, and each job's on_interrupt policy is applied at once; under
// retry a new attempt starts now, with a new fencing token. Claims whose
// lease expired are reaped too, and pending runs that are due start. Unlike
// CatchUp it leaves overdue slots alone (a provider decides those). The
// serving agent calls it when it starts.
func (rt *Runtime) Recover(ctx context.Context) error {
	if rt.closing.Load() {
		return errDraining
	}
	p := &plan{}
	err := rt.store.Update(ctx, func(st *store.State) error {
		*p = plan{}
		now := rt.now()
		// A copy: a refused chain step's job is removed on the way.
		for _, j := range slices.Clone(st.All()) {
			if err := rt.settle(st, j, now, p); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		rt.unregister(p)
		return fmt.Errorf("agent: recover: %w", err)
	}
	rt.apply(ctx, p)
	return nil
}

// settle reaps j's claims whose owners are gone or whose leases expired,
// records the slots it let pass while paused, and starts its due pending
// runs: what Recover and CatchUp do first for every job.
func (rt *Runtime) settle(st *store.State, j *job.Job, now time.Time, p *plan) error {
	rt.reap(j, now, p)
	rt.skipPaused(j, now, p)
	return rt.drain(st, j, now, p)
}

// CatchUp handles everything due at now for all jobs, in one store update:
// claims whose owners are gone or whose leases expired are reaped; due
// pending runs start; and overdue slots are dealt with by each job's misfire
// policy (a slot within the grace window simply runs late); the slots passed
// while a job is paused are recorded skipped. It never leaves
// an enabled job with a past next_run_at.
func (rt *Runtime) CatchUp(ctx context.Context) error {
	if rt.closing.Load() {
		return errDraining
	}
	// Chains that expired meanwhile close first: their overdue steps must
	// not run.
	if _, err := rt.SweepChains(ctx); err != nil {
		return err
	}
	p := &plan{}
	err := rt.store.Update(ctx, func(st *store.State) error {
		*p = plan{}
		now := rt.now()
		// A copy: a refused chain step's job is removed on the way.
		for _, j := range slices.Clone(st.All()) {
			if err := rt.settle(st, j, now, p); err != nil {
				return err
			}
			if !j.Enabled || j.NextRunAt == nil || j.NextRunAt.After(now) {
				continue
			}
			sched, err := job.ParseSchedule(j, rt.cfg.Location)
			if err != nil {
				rt.log.Error("job schedule unreadable", "job_id", j.ID, "error", err)
				continue
			}
			if err := rt.misfire(st, j, sched, now, p); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		rt.unregister(p)
		return fmt.Errorf("agent: catch up: %w", err)
	}
	rt.apply(ctx, p)
	return nil
}

// maxEnumerate bounds how many overdue slots are listed one by one.
const maxEnumerate = 1000

// overdue is one application of a job's misfire policy to its overdue
// slots, under the store lock.
type overdue struct {
	rt     *Runtime
	st     *store.State
	j      *job.Job
	sched  *schedule.Schedule
	now    time.Time
	p      *plan
	slots  []time.Time // the overdue slots, oldest first, at most maxEnumerate
	more   bool        // more were overdue than listed
	latest time.Time
	onTime bool // the latest slot is within the grace (Tolerance: after the flexible window)
	grace  time.Duration
	runs   int
}

// misfire applies j's misfire policy to its overdue slots. The caller holds
// the store lock.
func (rt *Runtime) misfire(st *store.State, j *job.Job, sched *schedule.Schedule, now time.Time, p *plan) error {
	o := &overdue{rt: rt, st: st, j: j, sched: sched, now: now, p: p, slots: []time.Time{*j.NextRunAt}, grace: job.Tolerance(j, sched)}
	for {
		n, ok := sched.Next(o.slots[len(o.slots)-1])
		if !ok || n.After(now) {
			break
		}
		if len(o.slots) == maxEnumerate {
			o.more = true
			break
		}
		o.slots = append(o.slots, n)
	}
	o.latest = o.slots[len(o.slots)-1]
	o.onTime = !o.more && now.Sub(o.latest) <= o.grace
	var err error
	switch j.Misfire {
	case job.MisfireSkip:
		err = o.skip()
	case job.MisfireRunAll:
		err = o.runAll()
	default: // run_once
		for _, s := range o.slots[:len(o.slots)-1] {
			o.missed(s, fmt.Sprintf("misfire run_once: superseded by the run for slot %s", o.latest.Format(time.RFC3339)))
		}
		err = o.run(o.latest)
	}
	if err != nil {
		return err
	}
	if o.more {
		o.missed(now, fmt.Sprintf("misfire: more than %d slots overdue; later ones up to now were not listed", maxEnumerate))
	}
	j.Repeat.Completed += o.runs
	rt.advance(j, sched, now, now, notRun)
	return nil
}

func (o *overdue) missed(s time.Time, reason string) {
	o.rt.endRun(o.j, o.rt.entry(o.j, o.now, mark{missedRunID(o.j.ID, s), ledger.StateMissed, s, TriggerCatchUp, reason}), o.p)
}

func (o *overdue) trig(s time.Time) Trigger {
	if s.Equal(o.latest) && o.onTime {
		return TriggerScheduled
	}
	return TriggerCatchUp
}

// limited reports whether the runs so far reach the job's repeat limit.
func (o *overdue) limited() bool {
	return o.j.Repeat.Times > 0 && o.j.Repeat.Completed+o.runs >= o.j.Repeat.Times
}

func (o *overdue) run(s time.Time) error {
	if o.limited() {
		o.missed(s, "repeat limit reached")
		return nil
	}
	res, err := o.rt.admitStep(o.st, o.j, o.sched, admission{slot: s, trig: o.trig(s)}, o.p)
	if err != nil {
		return err
	}
	if !res.Skipped {
		o.runs++
	}
	return nil
}

// skip is misfire skip: only the latest slot may still run, and only within
// the grace; an earlier one within the grace is superseded by it.
func (o *overdue) skip() error {
	for _, s := range o.slots {
		if s.Equal(o.latest) && o.onTime {
			if err := o.run(s); err != nil {
				return err
			}
			continue
		}
		late := o.now.Sub(s)
		if late > o.grace {
			o.missed(s, fmt.Sprintf("misfire skip: overdue by %s, beyond the grace of %s", late.Round(time.Second), o.grace))
			continue
		}
		o.missed(s, fmt.Sprintf("misfire skip: overdue by %s; superseded by slot %s", late.Round(time.Second), o.latest.Format(time.RFC3339)))
	}
	return nil
}

// runAll is misfire run_all: the first slot runs now, the next ones up to
// the catch-up bound are owed one after another, the rest are missed.
func (o *overdue) runAll() error {
	bound := o.rt.cfg.MaxCatchUp
	for i, s := range o.slots {
		switch {
		case i >= bound:
			o.missed(s, fmt.Sprintf("misfire run_all: beyond the catch-up bound of %d slots", bound))
		case i == 0:
			if err := o.run(s); err != nil {
				return err
			}
		case o.limited():
			o.missed(s, "repeat limit reached")
		default:
			o.j.Pending = append(o.j.Pending, job.Pending{RunID: newRunID(o.now), Slot: s.UTC(), Trigger: string(o.trig(s)), Attempt: 1,
				Cause: job.PendingCatchUp, Reason: fmt.Sprintf("misfire run_all: catch-up %d/%d", i+1, min(len(o.slots), bound))})
			o.runs++
		}
	}
	return o.rt.drain(o.st, o.j, o.now, o.p)
}

// RecordMissed records a fire NAS reports as failed (dead-lettered) as
// missed in the ledger, once per job and slot, and moves the job past the
// slot if it still waits for it. It reports whether it wrote the line: false
// when the slot was recorded before (NAS reported the fire again) or the
// agent already accounted for it. A nil error means the slot is durably
// accounted for either way.
func (rt *Runtime) RecordMissed(ctx context.Context, jobID string, slot time.Time, reason string) (bool, error) {
	slot = slot.UTC()
	runID := missedRunID(jobID, slot)
	var line *ledger.Entry
	overdue, notified := false, false
	err := rt.store.Update(ctx, func(st *store.State) error {
		line, overdue, notified = nil, false, false
		has, err := rt.ledger.Has(ctx, runID, slot.Add(-24*time.Hour))
		if err != nil {
			return err
		}
		if has || rt.heldLine(runID) {
			return nil
		}
		now := rt.now()
		j := st.Job(jobID)
		owed := j != nil && j.NextRunAt != nil && j.NextRunAt.Equal(slot)
		if j != nil && !owed {
			// The slot is no longer owed: if this agent already accounted
			// for it (ran it, or its misfire policy decided it), the
			// upstream failure adds nothing and a second line would say the
			// slot was handled twice.
			handled, err := rt.slotHandled(ctx, jobID, slot)
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
			if sched, err := job.ParseSchedule(j, rt.cfg.Location); err == nil {
				// Move to the slot after the failed one, not past now: later
				// slots that are overdue too are the misfire policy's to
				// decide (CatchUp below), never skipped in silence.
				rt.advance(j, sched, slot, slot, notRun)
				j.UpdatedAt = now.UTC()
				if j.FinishedAt != nil {
					j.FinishedAt = utcPtr(now)
				}
				overdue = j.Enabled && j.NextRunAt != nil && !j.NextRunAt.After(now)
			}
		}
		e := rt.entry(j, now, mark{runID, ledger.StateMissed, slot, TriggerScheduled, "fire failed upstream: " + strings.TrimSpace(reason)})
		if err := rt.ledger.Append(ctx, e); err != nil {
			return err
		}
		line = &e
		notified = rt.owe(j, e, notify.Run{})
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("agent: record missed: %w", err)
	}
	if notified {
		rt.handOverNow(ctx)
	}
	if line != nil {
		rt.signal()
	}
	if overdue {
		if err := rt.CatchUp(ctx); err != nil {
			return line != nil, fmt.Errorf("agent: record missed: %w", err)
		}
	}
	return line != nil, nil
}
