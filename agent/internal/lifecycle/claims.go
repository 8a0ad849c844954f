package lifecycle

import (
	"fmt"
	"time"

	"github.com/chronoscron/chronos/agent/fanout"
	"github.com/chronoscron/chronos/agent/internal/runs"
	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/store"
)

// reap releases claims whose owner is provably gone or, for an owner that
// cannot be judged (another host), whose lease expired, recording them
// interrupted; what is left of a dead owner's processes is killed first
// (see apply). A claim of this process is never reaped while the run is
// this process's (running, or its result held until durable), nor one of a
// live owner on this host, whatever its lease says. Under on_interrupt
// retry the slot is owed again as a pending retry: at once when the owner
// is provably gone, after the backoff when only its lease expired. The
// caller holds the store lock.
func (ad *Admission) reap(j *job.Job, now time.Time, p *Plan) {
	if len(j.Claims) == 0 {
		return
	}
	kept := make([]job.Claim, 0, len(j.Claims))
	for _, c := range j.Claims {
		var why string
		gone := false
		switch ad.judge(&c) {
		case runs.OwnerSelf:
			if ad.Runs.Active(c.RunID, c.Token) {
				kept = append(kept, c)
				continue
			}
			why = "this process no longer runs it"
		case runs.OwnerAlive:
			kept = append(kept, c)
			continue
		case runs.OwnerGone:
			why = fmt.Sprintf("owner %s is gone", c.Owner)
			gone = true
			ad.planKill(j, c, p)
		default:
			if !now.After(c.LeaseUntil) {
				kept = append(kept, c)
				continue
			}
			why = fmt.Sprintf("lease of owner %s expired at %s", c.Owner, c.LeaseUntil.Format(time.RFC3339))
		}
		reason := "interrupted: " + why
		if j.OnInterrupt == job.InterruptRetry || ad.resumable(j, c) {
			if c.Attempt < j.Retry.Attempts() {
				d := j.Retry.Delay(c.Attempt + 1)
				if gone {
					d = 0
				}
				j.Pending = append(j.Pending, job.Pending{RunID: c.RunID, Slot: c.Slot, Trigger: string(runs.Retry),
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
					p.orphans = append(p.orphans, runs.Start{Job: *j, Claim: c})
				}
			}
		}
		j.LastStatus, j.LastError = job.StatusInterrupted, reason
		j.FailureStreak++
		e := ad.entry(j, now, runs.Mark{RunID: c.RunID, State: ledger.StateInterrupted, Slot: c.Slot, Trig: runs.Trigger(c.Trigger), Reason: reason})
		e.Owner, e.Token, e.Attempt, e.Forced = c.Owner, c.Token, c.Attempt, c.Forced
		p.endRun(j, e)
	}
	j.Claims = kept
}

// drain starts the first due pending run of j (a queued slot, a retry, a
// catch-up) when the overlap policy lets it. A chain step's run obeys its
// chain as a fire does (see admitStep): when the chain is gone, expired or
// closed, the step's pending runs are recorded skipped instead and dropped
// (see Chains.refuse); a run that starts marks the step running. The caller
// holds the store lock.
func (ad *Admission) drain(st *store.State, j *job.Job, now time.Time, p *Plan) error {
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
		if why, refused := ad.gate.blocked(st, j, now); refused != nil {
			ad.gate.refuse(st, j, stepRefusal{runID: q.RunID, why: why}, now, p)
			return nil
		}
		j.Pending = append(j.Pending[:i:i], j.Pending[i+1:]...)
		if err := ad.claim(j, job.Claim{RunID: q.RunID, Slot: q.Slot, Trigger: q.Trigger, Attempt: q.Attempt, Forced: q.Forced}, now, q.Reason, p); err != nil {
			return err
		}
		ad.gate.started(st, j, q.RunID, now)
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

// resumable reports whether claim c of j, found interrupted, is a fanout
// parent whose plan is on disk: it is run again, with the same run id, to
// resume its children.
func (ad *Admission) resumable(j *job.Job, c job.Claim) bool {
	if j.JobKind != job.JobKindFanout {
		return false
	}
	_, found, err := fanout.ReadPlan(ad.Home, c.RunID)
	return err == nil && found
}
