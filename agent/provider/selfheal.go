package provider

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/nasclient"
	"github.com/chronoscron/chronos/contract"
)

// Self-healing while awake. A serving agent reconciles on a timer too
// (ResyncInterval), and after each reconcile it sets a backstop timer for
// the earliest instant a job's slot will be overdue by more than its grace.
// A reconcile then accounts for every slot that passed without a fire:
//
//   - a slot NAS reports a final outcome for (its fire was dropped because the
//     operator stopped the instance, or dead-lettered), and every slot that
//     passed while NAS says the instance was stopped, is recorded missed with
//     NAS's reason and not run (Healer.MissSlots);
//   - a slot NAS holds no fire for is handed to the job's misfire policy at
//     once, its ledger lines saying "no fire arrived";
//   - a slot NAS holds but has not delivered within the job's grace (a lost
//     delivery), and, while NAS cannot be reached, any slot overdue by more
//     than its grace, goes to the misfire policy too (the backstop). A late
//     fire of NAS for such a slot then finds it claimed and answers
//     duplicate: the claim's compare-and-set on next_run_at is the guard.
//
// A slot beyond NAS's far-future horizon is armed as a refresh fire at the
// horizon instead (see RefreshPoint); its arrival re-arms without running.

// Defaults of the self-healing settings.
const (
	// DefaultResyncInterval is cron.chronos.resync_interval's default.
	DefaultResyncInterval = 5 * time.Minute
	// DefaultHorizon is how far ahead the agent arms a fire at most: a
	// slot further away is armed as a refresh fire. It is below NAS's
	// default limits.max_future (400 days); when NAS refuses a fire as too
	// far anyway, the agent halves its horizon and arms again.
	DefaultHorizon = 365 * 24 * time.Hour
	// minHorizon bounds the halving.
	minHorizon = time.Hour
	// minBackstopWait keeps a backstop timer whose instant has passed from
	// spinning.
	minBackstopWait = time.Second
	// backstopMargin is added to a backstop instant so the slot is overdue
	// by more than its grace when the timer fires.
	backstopMargin = 50 * time.Millisecond
)

// Healer is what the runtime offers the reconciler to account for slots
// that passed without a fire; *agent.Runtime implements it. A Source that
// is not a Healer gets the older behaviour: overdue slots NAS does not hold
// go to Source.CatchUp.
type Healer interface {
	// MissSlots records the slots of jobID from from (its next_run_at) up
	// to until as missed with reason, and moves the job past them.
	MissSlots(ctx context.Context, jobID string, from, until time.Time, reason string) (int, error)
	// Backstop hands the overdue slots decide accepts to the misfire policy.
	Backstop(ctx context.Context, decide func(o agent.Overdue) (cause string, ok bool)) (int, error)
	// BackstopAt returns when the earliest next slot will be overdue by
	// more than its grace.
	BackstopAt(ctx context.Context) (time.Time, bool, error)
}

var _ Healer = (*agent.Runtime)(nil)

// healer returns the Source as a Healer when the reconciler may act on
// overdue slots (CatchUp) and the Source can heal.
func (r *Reconciler) healer() (Healer, bool) {
	if !r.cfg.CatchUp {
		return nil, false
	}
	h, ok := r.cfg.Source.(Healer)
	return h, ok
}

// Resync asks Run for a reconcile soon without marking a change (InSync is
// left as it is): NAS asked for one, or a timer did. It never blocks.
func (r *Reconciler) Resync() {
	select {
	case r.resync <- struct{}{}:
	default:
	}
}

// Horizon returns how far ahead the reconciler arms a fire at most.
func (r *Reconciler) Horizon() time.Duration { return time.Duration(r.horizon.Load()) }

// RefreshPoint returns the instant to arm for a slot more than horizon after
// now: the latest instant slot - k×horizon (k ≥ 1) that is after now, so it
// lies within the horizon and stays the same while now advances towards it.
// A slot within the horizon is returned as it is.
func RefreshPoint(slot, now time.Time, horizon time.Duration) time.Time {
	d := slot.Sub(now)
	if horizon <= 0 || d <= horizon {
		return slot
	}
	k := (d - 1) / horizon
	return slot.Add(-time.Duration(k) * horizon)
}

// withinHorizon maps every desired fire beyond the horizon to its refresh
// point, which has no flexible window: it is no slot, and its fire only
// arms again.
func (r *Reconciler) withinHorizon(desired []agent.Desired, now time.Time) []agent.Desired {
	h := r.Horizon()
	out := make([]agent.Desired, len(desired))
	for i, d := range desired {
		out[i] = agent.Desired{JobID: d.JobID, FireAt: RefreshPoint(d.FireAt, now, h), Flex: d.Flex}
		if !out[i].FireAt.Equal(d.FireAt) {
			out[i].Flex = 0
		}
	}
	return out
}

// tooFar reports whether err is NAS refusing a fire_at beyond its horizon.
func tooFar(err error) bool {
	var ue *nasclient.UnprocessableError
	return errors.As(err, &ue) && ue.Code == contract.CodeFireAtTooFar
}

// provisionWithinHorizon provisions p (with its flexible window, if any),
// and while NAS refuses it as too far ahead, halves the horizon (for good:
// later arms use it too) and provisions the refresh point of slot, the
// job's real next slot, under it (without a window).
func (r *Reconciler) provisionWithinHorizon(ctx context.Context, p *Arm, slot time.Time) (contract.ProvisionResponse, error) {
	req := func() contract.ProvisionRequest {
		if !p.FireAt.Equal(slot) {
			p.FlexSeconds = 0 // a refresh point
		}
		return contract.ProvisionRequest{
			JobID: p.JobID, FireAt: contract.NewTime(p.FireAt), AgentCallbackURL: r.cfg.CallbackURL,
			DedupKey: nasclient.DedupKey(p.JobID, p.FireAt), FlexSeconds: p.FlexSeconds,
			Delivery: r.askDelivery(),
		}
	}
	out, err := r.cfg.NAS.Provision(ctx, req())
	for tooFar(err) {
		now := r.cfg.Now()
		h := min(r.Horizon(), p.FireAt.Sub(now)) / 2
		if h < minHorizon {
			return out, err
		}
		r.horizon.Store(int64(h))
		r.cfg.Logger.Warn("NAS refused a fire as too far ahead; arming refresh fires within a shorter horizon",
			"job_id", p.JobID, "fire_at", p.FireAt, "horizon", h.String())
		p.FireAt = RefreshPoint(slot, now, h).UTC()
		out, err = r.cfg.NAS.Provision(ctx, req())
	}
	return out, err
}

// instanceWindow is when NAS says the agent's instance was stopped: from
// StoppedAt to StartedAt, or to now while it is stopped. ok is false when
// there is none to heed.
func instanceWindow(st *contract.InstanceStatus, now time.Time) (from, to time.Time, ok bool) {
	if st == nil || st.StoppedAt == nil {
		return time.Time{}, time.Time{}, false
	}
	from = st.StoppedAt.Time
	switch {
	case st.Stopped:
		to = now
	case st.StartedAt != nil && st.StartedAt.After(from):
		to = st.StartedAt.Time
	default:
		return time.Time{}, time.Time{}, false
	}
	return from, to, true
}

// lastFireReason is the ledger reason of a slot whose fire NAS reports with
// a final outcome that left it unrun, or "" for one that does not.
func lastFireReason(u contract.UnarmedJob) string {
	switch u.Outcome {
	case contract.LastFireInstanceStopped:
		return "no fire arrived: NAS dropped the fire, the instance was stopped (" + u.Reason + ")"
	case contract.LastFireDeadLettered:
		return "no fire arrived: NAS gave up on the fire: " + u.Reason
	}
	return ""
}

// heal accounts for the slots the agent waits for that NAS will not deliver
// (see the comment at the top of this file). It reports whether it changed
// any job.
func (r *Reconciler) heal(ctx context.Context, h Healer, o *observation, res *Result, fail func(op, jobID string, err error)) bool {
	now := o.now
	changed := false
	last := map[string]contract.UnarmedJob{}
	for _, u := range o.listing.Unarmed {
		last[u.JobID] = u
	}
	winFrom, winTo, stopped := instanceWindow(o.listing.Instance, now)
	stoppedReason := ""
	if stopped {
		stoppedReason = fmt.Sprintf("no fire arrived: the operator stopped instance %s at NAS from %s", o.listing.Instance.InstanceID, contract.FormatTime(winFrom))
		if o.listing.Instance.Stopped {
			stoppedReason += " (still stopped)"
		} else {
			stoppedReason += " to " + contract.FormatTime(winTo)
		}
	}
	for jobID, slot := range o.waiting {
		reason, until := "", slot
		if u, ok := last[jobID]; ok && u.FireAt.Equal(slot) {
			reason = lastFireReason(u)
		}
		if stopped && !slot.Before(winFrom) && !slot.After(winTo) {
			reason, until = stoppedReason, winTo
		} else if stopped && reason != "" && last[jobID].Outcome == contract.LastFireInstanceStopped && winTo.After(slot) {
			until = winTo // dropped just before the stop was noted
		}
		if reason == "" {
			continue
		}
		n, err := h.MissSlots(ctx, jobID, slot, until, reason)
		if err != nil {
			fail("record missed", jobID, err)
			continue
		}
		if n > 0 {
			changed = true
			res.MissedRecorded += n
			r.cfg.Logger.Warn("slots passed without a fire; recorded missed", "job_id", jobID, "fire_at", slot, "slots", n, "reason", reason)
		}
	}
	if len(o.waiting) == 0 {
		return changed // no slot has come: nothing for the backstop
	}
	held := map[string]time.Time{}
	for _, a := range o.listing.Armed {
		held[a.JobID] = a.FireAt.Time
	}
	n, err := h.Backstop(ctx, func(ov agent.Overdue) (string, bool) {
		if stopped && !ov.Slot.Before(winFrom) && !ov.Slot.After(winTo) {
			return "", false // recorded missed above, or by now
		}
		if at, ok := held[ov.JobID]; ok && at.Equal(ov.Slot) {
			if ov.Late <= ov.Grace {
				return "", false // NAS is delivering it
			}
			return fmt.Sprintf("no fire arrived within the grace of %s although NAS holds it", ov.Grace), true
		}
		return "no fire arrived (NAS holds no fire for the slot)", true
	})
	if err != nil {
		fail("backstop", "", err)
		return changed
	}
	if n > 0 {
		res.CaughtUp = true
		changed = true
	}
	return changed
}

// backstopUnreachable runs, while NAS cannot be listed, every slot overdue
// by more than its grace through the misfire policy: NAS may still deliver
// a slot within its grace when it is back, but not one beyond it.
func (r *Reconciler) backstopUnreachable(ctx context.Context, h Healer, listErr error, res *Result, fail func(op, jobID string, err error)) {
	n, err := h.Backstop(ctx, func(ov agent.Overdue) (string, bool) {
		if ov.Late <= ov.Grace {
			return "", false
		}
		return fmt.Sprintf("no fire arrived within the grace of %s (NAS unreachable: %v)", ov.Grace, listErr), true
	})
	if err != nil {
		fail("backstop", "", err)
		return
	}
	if n > 0 {
		res.CaughtUp = true
		r.cfg.Logger.Warn("NAS unreachable: overdue slots run by the misfire policy", "jobs", n)
	}
}

// nextBackstop returns how long Run waits before it looks at the earliest
// slot again, or ok false when there is nothing to wait for.
func (r *Reconciler) nextBackstop(ctx context.Context) (time.Duration, bool) {
	h, ok := r.healer()
	if !ok {
		return 0, false
	}
	at, ok, err := h.BackstopAt(ctx)
	if err != nil || !ok {
		return 0, false
	}
	return max(at.Sub(r.cfg.Now())+backstopMargin, minBackstopWait), true
}
