package agent

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/chronoscron/chronos/agent/chain"
	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/notify"
	"github.com/chronoscron/chronos/agent/runner"
	"github.com/chronoscron/chronos/agent/schedule"
	"github.com/chronoscron/chronos/agent/store"
)

// Environment variables of runs (see RunEnv).
const (
	EnvRunHome          = "CHRONOS_HOME"
	EnvChainID          = "CHRONOS_CHAIN_ID"
	EnvChainClass       = "CHRONOS_CHAIN_CLASS"
	EnvChainStage       = "CHRONOS_CHAIN_STAGE"
	EnvChainDepth       = "CHRONOS_CHAIN_DEPTH"
	EnvChainAttempt     = "CHRONOS_CHAIN_ATTEMPT"
	EnvChainExpiresAt   = "CHRONOS_CHAIN_EXPIRES_AT"
	EnvChainStep        = "CHRONOS_CHAIN_STEP"
	EnvChainMaxDepth    = "CHRONOS_CHAIN_MAX_DEPTH"
	EnvChainMaxChildren = "CHRONOS_CHAIN_MAX_CHILDREN"
)

// RunEnv returns the variables a run of j gets besides its payload's:
// CHRONOS_HOME (the agent's home, so `chronos chain ...` inside the run
// finds the store) and, for a chain step, its chain metadata.
func RunEnv(home string, j *job.Job) map[string]string {
	env := map[string]string{EnvRunHome: home}
	if m := j.Chain; m != nil {
		env[EnvChainID] = m.ChainID
		env[EnvChainClass] = m.ChainClass
		env[EnvChainStage] = m.Stage
		env[EnvChainDepth] = strconv.Itoa(m.Depth)
		env[EnvChainAttempt] = strconv.Itoa(m.Attempt)
		env[EnvChainExpiresAt] = m.ExpiresAt.UTC().Format(time.RFC3339)
		env[EnvChainMaxDepth] = strconv.Itoa(m.MaxDepth)
		env[EnvChainMaxChildren] = strconv.Itoa(m.MaxChildren)
		env[EnvChainStep] = j.ID
	}
	return env
}

// runRequest is the runner's request for claim c of j.
func (rt *Runtime) runRequest(j *job.Job, c job.Claim) runner.Request {
	return runner.Request{JobID: j.ID, RunID: c.RunID, FireAt: c.Slot, Attempt: c.Attempt, Payload: j.Payload,
		Chain: j.Chain.Clone(), Env: RunEnv(rt.cfg.Home, j)}
}

// stepRef names step s of c in ledger lines.
func stepRef(c *chain.Chain, s chain.Step) *ledger.ChainRef {
	return &ledger.ChainRef{ID: c.ID, Class: c.Class, Stage: s.Stage, Depth: s.Depth, Attempt: s.Attempt, Step: s.JobID}
}

// jobChainRef names j's chain and place on the lines of its runs (nil
// for a job outside chains).
func jobChainRef(j *job.Job) *ledger.ChainRef {
	if j.Chain == nil {
		return nil
	}
	m := j.Chain
	return &ledger.ChainRef{ID: m.ChainID, Class: m.ChainClass, Stage: m.Stage, Depth: m.Depth, Attempt: m.Attempt}
}

// chainLine is a ledger line of kind chain about ref.
func (rt *Runtime) chainLine(ref *ledger.ChainRef, ev ledger.State, reason string, now time.Time) ledger.Entry {
	return ledger.Entry{Time: now.UTC(), RunID: "c" + newRunID(now)[1:], JobID: ref.ID, State: ev, Slot: now.UTC(),
		Reason: reason, Owner: rt.self.String(), Kind: ledger.KindChain, Chain: ref}
}

// refusedLine is the ledger line of a refusal; Event names its reason.
func (rt *Runtime) refusedLine(ref *ledger.ChainRef, err error, prefix string, now time.Time) ledger.Entry {
	e := rt.chainLine(ref, ledger.ChainRefused, prefix+err.Error(), now)
	e.Event = chain.RefusalReason(err)
	return e
}

// breakerLine is a ledger line of kind chain about class breaker b.
func (rt *Runtime) breakerLine(b *chain.Breaker, ev ledger.State, reason string, now time.Time) ledger.Entry {
	e := rt.chainLine(&ledger.ChainRef{ID: b.Class, Class: b.Class}, ev, reason, now)
	e.JobID = "breaker:" + b.Class
	return e
}

// closeChain closes c with how: its pending steps' jobs are removed, the
// runs owed to its steps with no run live (a retry after an interrupted
// run, a queued slot) are recorded skipped and their jobs removed too, the
// class's breaker counts the outcome (a limit is an invariant violation
// and opens it) and the lines are planned. A step still running keeps its
// job until the run ends (see endChainStep). The caller holds the store
// lock.
func (rt *Runtime) closeChain(st *store.State, c *chain.Chain, how chain.Closing, now time.Time, p *plan) {
	for _, id := range c.Close(now, how) {
		st.Remove(id)
	}
	for _, s := range slices.Clone(c.Steps) {
		j := st.Job(s.JobID)
		if j == nil || j.Chain == nil || len(j.Claims) > 0 || len(j.Pending) == 0 {
			continue
		}
		why, _ := stepBlocked(j, c, now)
		rt.refuseStep(st, j, stepRefusal{runID: j.Pending[0].RunID, why: why}, now, p)
	}
	rt.closed(st, c, now, p)
}

// closed plans what follows a chain's close: its line, the breaker's count
// and alert, and the pruning of old closed chains.
func (rt *Runtime) closed(st *store.State, c *chain.Chain, now time.Time, p *plan) {
	p.lines = append(p.lines, rt.chainLine(&ledger.ChainRef{ID: c.ID, Class: c.Class}, ledger.ChainClosed,
		fmt.Sprintf("closed (%s): %s", c.Outcome, c.ClosedReason), now))
	b := st.Breaker(c.Class)
	if o, opened := b.RecordClose(c, rt.cfg.Chains.Policy(c.Class), now); opened {
		rt.breakerOpened(b, o, c.ID, now, p)
	}
	st.PruneChains()
}

// breakerOpened plans the ledger line and the alerts of a breaker that
// opened: one row per target, durable in this write (b.Outbound), handed to
// the outbox after it.
func (rt *Runtime) breakerOpened(b *chain.Breaker, o chain.Opening, chainID string, now time.Time, p *plan) {
	p.lines = append(p.lines, rt.breakerLine(b, ledger.ChainBreakerOpened,
		fmt.Sprintf("opened until %s: %s; last runs %s", b.ResumeAt.Format(time.RFC3339), o.Reason, strings.Join(o.RunIDs, ", ")), now))
	alert := &notify.BreakerAlert{Class: b.Class, Reason: o.Reason, RunIDs: o.RunIDs, OpenedAt: *b.OpenedAt, ResumeAt: *b.ResumeAt}
	runID := fmt.Sprintf("breaker-%s-%d", b.Class, b.OpenedAt.UnixNano())
	for _, t := range rt.cfg.Chains.targets(b.Class) {
		id := notify.NotificationID(runID, notify.EventChainBreakerOpen, t)
		body := notify.Body{ID: id, Event: notify.EventChainBreakerOpen, JobID: chainID, RunID: runID, Slot: now.UTC(),
			Status: string(chain.BreakerOpen), Error: o.Reason, Time: now.UTC(), Breaker: alert}
		b.Outbound = append(b.Outbound, notify.Notification{ID: id, Target: t, Body: body, CreatedAt: now.UTC()})
		p.owed = true
	}
}

// breakerRows returns the breaker alerts waiting in jobs.json.
func breakerRows(st *store.State) []notify.Notification {
	var rows []notify.Notification
	for _, b := range st.Breakers() {
		rows = append(rows, b.Outbound...)
	}
	return rows
}

// dropBreakerRows drops the alerts the outbox has taken.
func dropBreakerRows(st *store.State, added map[string]bool) {
	for _, b := range st.Breakers() {
		var kept []notify.Notification
		for _, r := range b.Outbound {
			if !added[r.ID] {
				kept = append(kept, r)
			}
		}
		b.Outbound = kept
	}
}

// admitStep admits a fire or manual run of j like admit, and for a chain
// step first checks its chain: a step of a chain that is gone, expired or
// closed does not run (recorded skipped, and see refuseStep) and p.refused
// says why; a step that starts is marked running. The caller holds the
// store lock.
func (rt *Runtime) admitStep(st *store.State, j *job.Job, sched *schedule.Schedule, a admission, p *plan) (FireResult, error) {
	now := rt.now()
	if j.Chain == nil {
		return rt.admit(j, sched, a, now, p)
	}
	c := st.Chain(j.Chain.ChainID)
	why, refused := stepBlocked(j, c, now)
	if refused == nil {
		res, err := rt.admit(j, sched, a, now, p)
		if err == nil && res.RunID != "" && !res.Skipped && !res.Queued {
			c.StepStarted(j.ID, res.RunID, now)
		}
		return res, err
	}
	runID := newRunID(now)
	e := rt.entry(j, now, mark{runID, ledger.StateSkipped, a.slot, a.trig, why})
	e.Forced = a.forced
	p.lines = append(p.lines, e)
	p.refused = fmt.Errorf("%w; recorded skipped as run %s", refused, runID)
	rt.refuseStep(st, j, stepRefusal{runID: runID, why: why}, now, p)
	return FireResult{Status: FireAccepted, RunID: runID, Skipped: true, Reason: why}, nil
}

// stepRefusal is a run of a chain step its chain refused: its run id and
// the reason its skip is recorded with (see stepBlocked).
type stepRefusal struct {
	runID, why string
}

// refuseStep carries out refusal r of a run of chain step j: the step's
// pending runs (queued slots, retries) are recorded skipped with the same
// reason and dropped, as its chain will never let them run; the step, when
// no run of it is live, is marked skipped as run r.runID; a chain still
// open (it expired, the sweeper has not closed it yet) is closed expired;
// and the job is removed when nothing of it is left. The caller holds the
// store lock.
func (rt *Runtime) refuseStep(st *store.State, j *job.Job, r stepRefusal, now time.Time, p *plan) {
	rt.skipOwed(j, r.why, now, p)
	if c := chainOf(st, j); c != nil {
		if s := c.Step(j.ID); s != nil && s.Status.Open() && len(j.Claims) == 0 {
			s.Status, s.RunID, s.EndedAt, s.Reason = chain.StepSkipped, r.runID, utcPtr(now), r.why
		}
		rt.closeExpired(st, c, now, p)
	}
	if len(j.Claims) == 0 && len(j.Outbound) == 0 {
		st.Remove(j.ID)
	}
}

// skipOwed records j's pending runs (queued slots, retries) skipped with
// reason why and drops them. The caller holds the store lock.
func (rt *Runtime) skipOwed(j *job.Job, why string, now time.Time, p *plan) {
	for _, q := range j.Pending {
		e := rt.entry(j, now, mark{q.RunID, ledger.StateSkipped, q.Slot, Trigger(q.Trigger), why})
		e.Attempt, e.Forced = q.Attempt, q.Forced
		p.lines = append(p.lines, e)
	}
	j.Pending = nil
}

// closeExpired closes c (nil: nothing) expired when it is still open: a
// step was refused because it expired before the sweeper closed it. The
// caller holds the store lock.
func (rt *Runtime) closeExpired(st *store.State, c *chain.Chain, now time.Time, p *plan) {
	if c != nil && c.Open() {
		rt.closeChain(st, c, chain.Closing{Reason: chain.ReasonExpired, Outcome: chain.OutcomeFailure, Trigger: chain.TriggerExpiry}, now, p)
	}
}

// chainOf returns the chain of step j, or nil (not a step, or its chain
// is gone).
func chainOf(st *store.State, j *job.Job) *chain.Chain {
	if j.Chain == nil {
		return nil
	}
	return st.Chain(j.Chain.ChainID)
}

// stepBlocked says why step j of chain c (nil when gone) may not run at
// now: the reason its skip is recorded with and the refusal a manual run
// answers, wrapping chain.ErrExpired or chain.ErrClosed. Both are empty
// while the chain is open and before its expiry.
func stepBlocked(j *job.Job, c *chain.Chain, now time.Time) (string, error) {
	switch {
	case c == nil:
		return "chain gone", fmt.Errorf("%w: chain %s of step %s is gone", chain.ErrClosed, j.Chain.ChainID, j.ID)
	case !now.Before(c.ExpiresAt):
		return "chain expired", fmt.Errorf("%w: chain %s of step %s expired at %s", chain.ErrExpired, c.ID, j.ID, c.ExpiresAt.UTC().Format(time.RFC3339))
	case !c.Open():
		return "chain closed: " + c.ClosedReason, fmt.Errorf("%w: chain %s of step %s closed at %s, reason %s", chain.ErrClosed, c.ID, j.ID,
			c.ClosedAt.UTC().Format(time.RFC3339), c.ClosedReason)
	}
	return "", nil
}

// endChainStep records the end of a chain step's run in its chain (which
// closes when no step is left open) and removes the step's job, in the
// write that completes the run. A step whose job still has a run live, or
// one owed (a retry, a queued slot) that its chain would let start, is not
// over: it stays open in its chain, and the run that follows records its
// end. The caller holds the store lock.
func (rt *Runtime) endChainStep(st *store.State, j *job.Job, cp *completion, p *plan) {
	if j.Chain == nil || len(j.Claims) > 0 {
		return
	}
	now := cp.line.Time
	c := st.Chain(j.Chain.ChainID)
	if why, refused := stepBlocked(j, c, now); len(j.Pending) > 0 {
		if refused == nil {
			return
		}
		// The owed runs will never start: they are recorded skipped now,
		// and the step ends with this run, in a chain closed expired if it
		// expired meanwhile.
		rt.skipOwed(j, why, now, p)
		rt.closeExpired(st, c, now, p)
	}
	if c != nil {
		status := chain.StepFailed
		switch cp.state {
		case ledger.StateSucceeded:
			status = chain.StepSucceeded
		case ledger.StateInterrupted:
			status = chain.StepInterrupted
		}
		end := chain.Step{JobID: j.ID, Status: status, RunID: cp.line.RunID, Reason: cp.reason, Output: cp.line.Output}
		if c.StepEnded(end, now) {
			rt.closed(st, c, now, p)
		}
	}
	if len(j.Pending) == 0 && len(j.Outbound) == 0 {
		st.Remove(j.ID)
	}
}

// NextChainDeadline returns the earliest time something about chains is
// due: an open chain's expiry or taper end, or an open breaker's resume
// time. ok is false when nothing is.
func (rt *Runtime) NextChainDeadline(ctx context.Context) (time.Time, bool, error) {
	var next time.Time
	found := false
	consider := func(t time.Time, ok bool) {
		if ok && (!found || t.Before(next)) {
			next, found = t, true
		}
	}
	err := rt.store.View(ctx, func(st *store.State) error {
		for _, c := range st.Chains() {
			consider(c.Deadline())
		}
		for _, b := range st.Breakers() {
			consider(b.Deadline())
		}
		return nil
	})
	return next, found, err
}

// SweepChains closes the chains whose deadline has passed (expired:
// pending steps cancelled, their jobs removed so the reconcile cancels them
// at NAS; a taper's end) and closes the breakers whose cooldown is over.
// It reports how many chains it closed. A sweep with nothing due writes
// nothing.
func (rt *Runtime) SweepChains(ctx context.Context) (int, error) {
	now := rt.now()
	stale := false
	if err := rt.store.View(ctx, func(st *store.State) error { stale = len(staleSteps(st)) > 0; return nil }); err != nil {
		return 0, err
	}
	if next, ok, err := rt.NextChainDeadline(ctx); err != nil || (!stale && (!ok || next.After(now))) {
		return 0, err
	}
	closed := 0
	p := &plan{}
	err := rt.store.Update(ctx, func(st *store.State) error {
		*p, closed = plan{}, 0
		for _, c := range st.Chains() {
			if ids, ok := c.Due(now); ok {
				for _, id := range ids {
					st.Remove(id)
				}
				rt.closed(st, c, now, p)
				closed++
			}
		}
		for _, b := range st.Breakers() {
			if b.Settle(now) {
				p.lines = append(p.lines, rt.breakerLine(b, ledger.ChainBreakerClosed, "cooldown over", now))
			}
		}
		for _, j := range staleSteps(st) {
			end := chain.Step{JobID: j.ID, Status: chain.StepInterrupted, Reason: "its run ended without a result (its owner died)"}
			if c := st.Chain(j.Chain.ChainID); c != nil && c.StepEnded(end, now) {
				rt.closed(st, c, now, p)
			}
			st.Remove(j.ID)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("agent: chain sweep: %w", err)
	}
	rt.apply(ctx, p)
	if closed > 0 {
		rt.signal()
	}
	return closed, nil
}

// RunChainSweeper sweeps chains (SweepChains) at each chain deadline and
// after every change, until ctx ends. RunTimer runs it; a serving agent
// with another provider runs it itself.
func (rt *Runtime) RunChainSweeper(ctx context.Context) error {
	changes, unsubscribe := rt.subscribe()
	defer unsubscribe()
	const recheck = time.Minute
	for {
		if _, err := rt.SweepChains(ctx); err != nil && ctx.Err() == nil {
			rt.log.Warn("chain sweep failed; trying again", "error", err)
		}
		wait := recheck
		if next, ok, err := rt.NextChainDeadline(ctx); err == nil && ok {
			wait = min(max(next.Sub(rt.now()), 0)+10*time.Millisecond, recheck)
		} else if err != nil {
			wait = time.Second
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-changes:
			t.Stop()
		case <-t.C:
		}
	}
}

// staleSteps returns the jobs of steps that have nothing left to run but
// are still stored: a step whose run ended without its completion (its
// owner died and the claim was reaped), or one whose chain is gone. The
// completion of a run removes its step's job, so the sweep removes these.
func staleSteps(st *store.State) []*job.Job {
	var out []*job.Job
	for _, j := range st.All() {
		if j.Chain == nil || len(j.Claims) > 0 || len(j.Pending) > 0 || len(j.Outbound) > 0 {
			continue
		}
		if c := st.Chain(j.Chain.ChainID); c == nil || j.FinishedAt != nil {
			out = append(out, j)
		}
	}
	return out
}

// sweepBeside runs RunChainSweeper in the background until ctx ends; the
// function it returns waits for it to return.
func (rt *Runtime) sweepBeside(ctx context.Context) (wait func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = rt.RunChainSweeper(ctx)
	}()
	return func() { <-done }
}
