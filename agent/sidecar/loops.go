package sidecar

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/chronoscron/chronos/agent/activation"
	"github.com/chronoscron/chronos/agent/clockskew"
	"github.com/chronoscron/chronos/agent/nasclient"
	"github.com/chronoscron/chronos/agent/provider"
)

// Bounds of the retry of run recovery.
const (
	recoverFirstWait = time.Second
	recoverMaxWait   = 30 * time.Second
	// readyPoll is how often readiness looks whether the first reconcile
	// has finished.
	readyPoll = 20 * time.Millisecond
)

// newNASClient returns the client of NAS's agent API for ch (asking for
// its delivery mode), telling clock the Date of NAS's answers; maxAttempts
// 0 is the client's default.
func newNASClient(ch provider.ChronosConfig, log *slog.Logger, maxAttempts int, clock *clockskew.Estimator) (*nasclient.Client, error) {
	delivery, err := ch.DeliveryMode()
	if err != nil {
		return nil, err
	}
	return nasclient.New(nasclient.Config{PortalURL: ch.PortalURL, AccessToken: ch.AccessToken, MaxAttempts: maxAttempts, Logger: log,
		Clock: clock, Now: clock.Local, Delivery: delivery})
}

// saveState records the serving agent in the home's state file, for
// `chronos agent status`; stoppedAt is set when it has stopped.
func (s *sidecar) saveState(stoppedAt *time.Time) {
	st := provider.AgentState{PID: os.Getpid(), Provider: s.o.Decision.Provider, Why: s.o.Decision.Why(),
		Listen: s.ln.Addr().String(), StartedAt: s.started, UpdatedAt: time.Now(), StoppedAt: stoppedAt}
	if s.verifier != nil {
		h := s.verifier.Health(s.runCtx)
		st.JWKS = &h
	}
	if err := provider.UpdateState(context.WithoutCancel(s.runCtx), s.o.Config.Home, func(ps *provider.State) { ps.Agent = &st }); err != nil {
		s.log.Warn("writing the agent state failed", "error", err)
	}
}

// startLoops starts the chain sweeper (the built-in timer runs its own), the change fan-out and the reconciler (with the wait
// for NAS's key set) and the notifier, or the built-in timer (which runs
// the notifier itself).
func (s *sidecar) startLoops() {
	if s.rec != nil {
		s.wg.Go(func() { _ = s.rt.RunChainSweeper(s.runCtx) })
		s.wg.Go(func() {
			if err := s.rt.RunNotifier(s.runCtx); err != nil && s.runCtx.Err() == nil {
				s.log.Error("notifier stopped", "error", err)
			}
		})
		s.wg.Go(s.sweepPaused)
		s.wg.Go(func() { _ = s.rec.Run(s.runCtx, nil) })
		s.wg.Go(func() {
			if s.verifier.WaitReady(s.runCtx) == nil {
				s.log.Info("NAS's key set loaded", "keys", s.verifier.Health(s.runCtx).Keys, "after", time.Since(s.started).Round(time.Millisecond).String())
				s.saveState(nil)
			}
		})
		return
	}
	s.wg.Go(func() {
		if err := s.rt.RunTimer(s.runCtx); err != nil && s.runCtx.Err() == nil {
			s.log.Error("built-in timer stopped", "error", err)
		}
	})
}

// sweepPaused records, every PausedSweep, the slots that passed while a job
// was paused. Under NAS nothing fires a paused job, so without it those
// slots would leave a trace only when someone next touched the job; the
// built-in timer does the same in its catch-up.
func (s *sidecar) sweepPaused() {
	every := s.o.PausedSweep
	if every <= 0 {
		every = DefaultPausedSweep
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if s.anyPaused() {
			if _, err := s.rt.RecordPaused(s.runCtx); err != nil && s.runCtx.Err() == nil {
				s.log.Warn("recording the slots of paused jobs failed; trying again", "error", err, "in", every.String())
			}
		}
		select {
		case <-s.runCtx.Done():
			return
		case <-t.C:
		}
	}
}

// anyPaused reports whether a job is paused, from a read of the store, so a
// sweep with nothing to do writes nothing.
func (s *sidecar) anyPaused() bool {
	jobs, err := s.rt.Jobs(s.runCtx)
	if err != nil {
		return false
	}
	for _, j := range jobs {
		if j.PausedFrom != nil {
			return true
		}
	}
	return false
}

// fanOut fans the runtime's change signal out to the reconciler and, with
// the server's finished requests, to the returned activity channel. Kick
// marks the reconciler out of sync at once, so an idle check never sees a
// change that is still on its way.
func (s *sidecar) fanOut() <-chan struct{} {
	activity := make(chan struct{}, 1)
	s.wg.Go(func() {
		for {
			select {
			case <-s.runCtx.Done():
				return
			case <-s.rt.Changes():
				if s.rec != nil {
					s.rec.Kick()
				}
				notify(activity)
			case <-s.srv.Activity():
				notify(activity)
			}
		}
	})
	return activity
}

// startIdle starts the idle clock when IdleExit is set; the returned
// channel is closed once the agent has been idle for it. On the built-in
// timer the agent never idles out: its timer is its only trigger, and
// nothing would start it again for the next slot.
func (s *sidecar) startIdle(activity <-chan struct{}) <-chan struct{} {
	idle := make(chan struct{})
	if s.o.IdleExit > 0 && !s.o.Decision.Chronos() {
		s.log.Warn("idle exit is off on the built-in timer: this process is the only trigger of its jobs", "idle_exit", s.o.IdleExit.String())
		return idle
	}
	if s.o.IdleExit > 0 {
		s.wg.Go(func() {
			if activation.WaitIdle(s.runCtx, s.o.IdleExit, activity, s.busy) == nil {
				close(idle)
			}
		})
	}
	return idle
}

// busy says why the agent must not exit yet, or "" when it may.
func (s *sidecar) busy(ctx context.Context) string {
	switch {
	case s.srv.Active() > 0:
		return "requests in progress"
	case s.rt.InFlight() > 0:
		return "runs in flight"
	case s.rt.Unsaved() > 0:
		return "results not stored yet"
	case s.rec != nil && !s.rec.InSync():
		return "NAS is not in sync with the jobs yet"
	case s.rec != nil:
		return ""
	}
	next, ok, err := s.rt.NextDue(ctx)
	if err != nil {
		return "cannot read the next due time: " + err.Error()
	}
	if ok && time.Until(next) < s.o.IdleExit {
		return "a job is due within the idle period"
	}
	return ""
}

// notify sends on a coalescing channel without blocking.
func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// recoverRuns retries settling the runs of a dead agent with backoff until
// it succeeds or the agent stops.
func (s *sidecar) recoverRuns() {
	wait := recoverFirstWait
	for {
		select {
		case <-s.runCtx.Done():
			return
		case <-time.After(wait):
		}
		err := s.rt.Recover(s.runCtx)
		if err == nil || s.runCtx.Err() != nil {
			return
		}
		wait = min(2*wait, recoverMaxWait)
		s.log.Error("settling the runs of a dead agent failed; trying again", "error", err, "in", wait.String())
	}
}

// ready tells the notifier the agent serves once the first reconcile has
// finished (at most ReadyTimeout) or, under the built-in timer, the store
// has been checked; the watchdog then follows the store's health.
func (s *sidecar) ready() {
	if s.rec != nil && !s.firstReconcile() {
		if s.runCtx.Err() != nil {
			return
		}
		s.log.Warn("ready before the first reconcile finished", "waited", s.o.ReadyTimeout.String())
	}
	if err := s.srv.StoreWritable(s.runCtx); err != nil {
		s.log.Warn("ready, but the store cannot be written", "error", err)
	}
	s.o.Notifier.Ready(s.runCtx, s.log, s.srv.StoreWritable)
}

// firstReconcile waits until the reconciler has finished its first
// reconcile, in sync or failed; false when ReadyTimeout or the agent's
// life ends first.
func (s *sidecar) firstReconcile() bool {
	ctx, cancel := context.WithTimeout(s.runCtx, s.o.ReadyTimeout)
	defer cancel()
	t := time.NewTicker(readyPoll)
	defer t.Stop()
	for !s.rec.InSync() && s.rec.Failures() == 0 {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
	return true
}
