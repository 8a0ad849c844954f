package agent

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/chronoscron/chronos/agent/internal/runs"
	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/store"
)

// timerOps are the Runtime's timing: what to arm (Desired, NextDue) and the
// built-in timer that fires without a provider (RunTimer).
type timerOps struct{ rt *Runtime }

// Desired lists the fires the agent wants armed, one per job, ordered by job
// id: for every enabled job, its next_run_at if it is after now, or earlier
// the wake time of a pending run (a retry waiting out its backoff), so that
// an agent stopped between fires is woken for it. A provider reconciles NAS
// against it; past times are never listed.
func (t timerOps) Desired(ctx context.Context) ([]Desired, error) {
	var out []Desired
	err := t.rt.store.View(ctx, func(st *store.State) error {
		now := t.rt.now()
		out = out[:0]
		for _, j := range st.All() {
			if !j.Enabled {
				continue
			}
			var at time.Time
			var flex time.Duration
			if j.FinishedAt == nil && j.NextRunAt != nil && j.NextRunAt.After(now) {
				at, flex = *j.NextRunAt, j.Flex.Std()
			}
			for _, q := range j.Pending {
				if q.NotBefore.After(now) && (at.IsZero() || q.NotBefore.Before(at)) {
					at, flex = q.NotBefore, 0
				}
			}
			if !at.IsZero() {
				out = append(out, Desired{JobID: j.ID, FireAt: at, Flex: flex})
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("agent: desired: %w", err)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].JobID < out[b].JobID })
	return out, nil
}

// NextDue returns the earliest next_run_at among enabled jobs (it may be in
// the past); false when no job has one.
func (t timerOps) NextDue(ctx context.Context) (time.Time, bool, error) {
	var best time.Time
	found := false
	err := t.rt.store.View(ctx, func(st *store.State) error {
		for _, j := range st.All() {
			if j.Enabled && j.NextRunAt != nil && (!found || j.NextRunAt.Before(best)) {
				best, found = *j.NextRunAt, true
			}
		}
		return nil
	})
	if err != nil {
		return time.Time{}, false, fmt.Errorf("agent: next due: %w", err)
	}
	return best, found, nil
}

// wake is what the timer should do next.
type wake struct {
	at       time.Time
	ok       bool
	fireOnly []Desired // due now, one slot each, no other work: fire these
	sweep    bool      // anything else due now: run CatchUp
}

// nextWake finds the earliest instant anything is due: a next_run_at, a
// pending run, or the lease of another owner's claim (to reap it).
func (t timerOps) nextWake(ctx context.Context) (wake, error) {
	var w wake
	err := t.rt.store.View(ctx, func(st *store.State) error {
		w = wake{}
		now := t.rt.now()
		consider := func(t time.Time) {
			if !w.ok || t.Before(w.at) {
				w.at, w.ok = t, true
			}
		}
		for _, j := range st.All() {
			for i := range j.Claims {
				c := &j.Claims[i]
				switch t.rt.lc.Judge(c) {
				case runs.OwnerSelf:
					continue
				case runs.OwnerAlive:
					// A live owner's claim is never reaped; look again
					// after its lease (or a third of one, once it has
					// passed: the owner cannot renew it) to notice its
					// death.
					at := c.LeaseUntil.Add(time.Millisecond)
					if !at.After(now) {
						at = now.Add(t.rt.cfg.LeaseTTL / 3)
					}
					consider(at)
					continue
				case runs.OwnerGone:
					w.sweep = true
				default:
					if !c.LeaseUntil.After(now) {
						w.sweep = true
					}
				}
				consider(c.LeaseUntil.Add(time.Millisecond))
			}
			if !j.Enabled {
				if j.PausedFrom != nil {
					// A slot passing while paused is recorded skipped.
					consider(*j.PausedFrom)
					w.sweep = w.sweep || !j.PausedFrom.After(now)
				}
				continue
			}
			for _, q := range j.Pending {
				if len(j.Claims) > 0 && j.Overlap != job.OverlapAllow {
					break
				}
				if !q.NotBefore.After(now) {
					w.sweep = true
				}
				consider(q.NotBefore)
			}
			if j.NextRunAt == nil {
				continue
			}
			consider(*j.NextRunAt)
			if !j.NextRunAt.After(now) {
				sched, err := job.ParseSchedule(j, t.rt.cfg.Location)
				if err != nil {
					continue
				}
				if n, ok := sched.Next(*j.NextRunAt); ok && !n.After(now) {
					w.sweep = true // more than one slot overdue: misfire policy
				} else {
					w.fireOnly = append(w.fireOnly, Desired{JobID: j.ID, FireAt: *j.NextRunAt})
				}
			}
		}
		return nil
	})
	return w, err
}

// notifyBeside runs RunNotifier in the background until ctx ends; the
// function it returns waits for it to return.
func (t timerOps) notifyBeside(ctx context.Context) (wait func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := t.rt.RunNotifier(ctx); err != nil && ctx.Err() == nil {
			t.rt.log.Error("notifier stopped", "error", err)
		}
	}()
	return func() { <-done }
}

// RunTimer is the built-in timer, used when no provider arms fires: it
// applies CatchUp once, then sleeps until the earliest thing due (no polling
// tick), fires due slots through Fire with TriggerScheduled, and wakes early
// when jobs change (here or in another process). It runs the notifier
// (RunNotifier) beside it, so the runs it fires are told, and the chain
// sweeper (RunChainSweeper). It returns when ctx ends.
func (t timerOps) RunTimer(ctx context.Context) error {
	sub, unsub := t.rt.subscribe()
	defer unsub()
	defer t.notifyBeside(ctx)()
	defer t.sweepBeside(ctx)()
	if err := t.rt.CatchUp(ctx); err != nil && ctx.Err() == nil {
		t.rt.log.Error("catch-up failed", "error", err)
	}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if ctx.Err() != nil {
			return nil
		}
		w, err := t.nextWake(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			t.rt.log.Error("timer: reading jobs failed", "error", err)
			w = wake{at: t.rt.now().Add(time.Second), ok: true}
		}
		progressed := false
		if w.sweep {
			if err := t.rt.CatchUp(ctx); err != nil {
				if ctx.Err() == nil {
					t.rt.log.Error("timer: catch-up failed", "error", err)
				}
			} else {
				progressed = true
			}
		}
		for _, d := range w.fireOnly {
			res, err := t.rt.Fire(ctx, d.JobID, d.FireAt, TriggerScheduled)
			switch {
			case err != nil:
				if ctx.Err() == nil {
					t.rt.log.Error("timer: fire failed", "job_id", d.JobID, "fire_at", d.FireAt, "error", err)
				}
			case res.Status == FireBusy:
				t.rt.log.Warn("timer: fire deferred", "job_id", d.JobID, "reason", res.Reason)
			default:
				progressed = true
				t.rt.log.Debug("timer: fired", "job_id", d.JobID, "fire_at", d.FireAt, "status", res.Status, "run_id", res.RunID)
			}
		}
		if progressed {
			continue
		}
		if w.sweep || len(w.fireOnly) > 0 {
			// Due work could not be done (store busy or failing): back off.
			w = wake{at: t.rt.now().Add(time.Second), ok: true}
		}
		var fire <-chan time.Time
		if w.ok {
			d := w.at.Sub(t.rt.now())
			if d < 0 {
				d = 0
			}
			if timer == nil {
				timer = time.NewTimer(d)
			} else {
				timer.Reset(d)
			}
			fire = timer.C
		}
		select {
		case <-ctx.Done():
			return nil
		case <-sub:
		case <-fire:
		}
	}
}

// sweepBeside runs RunChainSweeper in the background until ctx ends; the
// function it returns waits for it to return.
func (t timerOps) sweepBeside(ctx context.Context) (wait func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = t.rt.RunChainSweeper(ctx)
	}()
	return func() { <-done }
}
