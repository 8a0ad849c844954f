package provider

import (
	"context"
	"slices"
	"time"

	"github.com/chronoscron/chronos/internal/backoff"
)

// Kick records a change and asks Run for a reconcile soon; it never blocks.
// InSync is false from the moment of the call until a reconcile that
// started after it succeeds.
func (r *Reconciler) Kick() {
	r.gen.Add(1)
	r.inSync.Store(false)
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Run reconciles at once, then after every signal on changes, every Kick
// and every Resync, until ctx ends. After a failure it retries on a backoff
// timer (RetryBase doubling up to RetryMax, with jitter); a success clears
// it. With ResyncInterval it also reconciles on that timer, and with the
// backstop (see ResyncInterval) when the earliest slot is overdue by more
// than its grace. The timers live in this process only: they never wake a
// stopped agent, and a reconcile that finds NAS in sync leaves InSync true
// throughout, so they do not keep an idle agent from exiting.
func (r *Reconciler) Run(ctx context.Context, changes <-chan struct{}) error {
	var (
		timer    *time.Timer
		retry    <-chan time.Time
		failures int
		resyncC  <-chan time.Time
		backstop = time.NewTimer(time.Hour)
	)
	backstop.Stop()
	defer backstop.Stop()
	if r.cfg.ResyncInterval > 0 {
		t := time.NewTicker(r.cfg.ResyncInterval)
		defer t.Stop()
		resyncC = t.C
	}
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	armBackstop := func() {
		backstop.Stop()
		if d, ok := r.nextBackstop(ctx); ok {
			backstop.Reset(d)
		}
	}
	once := func() {
		defer armBackstop()
		if timer != nil {
			timer.Stop()
			retry = nil
		}
		if _, err := r.Reconcile(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			d := r.backoff(failures)
			r.cfg.Logger.Warn("reconcile failed; retrying", "error", err, "failures", failures, "retry_in", d.String())
			timer = time.NewTimer(d)
			retry = timer.C
			return
		}
		failures = 0
	}
	once()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-changes:
			// Most writes to the job store (a run starting or ending, a
			// ledger line) leave the fires to arm as they were: those
			// cost NAS no list and no provision.
			if r.desiredUnchanged(ctx) {
				continue
			}
			r.gen.Add(1)
			r.inSync.Store(false)
			once()
		case <-r.kick:
			once()
		case <-retry:
			once()
		case <-r.resync:
			once()
		case <-resyncC:
			once()
		case <-backstop.C:
			once()
		}
	}
}

// desiredUnchanged reports whether the agent is in sync and its jobs ask
// for exactly the fires the last successful reconcile armed for, so that a
// change of the job store needs no reconcile.
func (r *Reconciler) desiredUnchanged(ctx context.Context) bool {
	if !r.inSync.Load() || r.rekey.Load() {
		return false
	}
	r.mu.Lock()
	last := r.lastDesired
	r.mu.Unlock()
	if last == nil {
		return false
	}
	d, err := r.cfg.Source.Desired(ctx)
	if err != nil {
		return false
	}
	return slices.Equal(r.withinHorizon(d, r.cfg.Now()), last)
}

// backoff returns how long Run waits after its failures-th failure in a row.
func (r *Reconciler) backoff(failures int) time.Duration {
	return backoff.Policy{Base: r.cfg.RetryBase, Max: r.cfg.RetryMax, Jitter: backoff.JitterUpperHalf}.Delay(failures)
}
