package lifecycle

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/chronoscron/chronos/agent/chain"
	"github.com/chronoscron/chronos/agent/internal/runs"
	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/notify"
	"github.com/chronoscron/chronos/agent/store"
)

// Chains is the gate every chain step passes: asked when a step's run is
// admitted (blocked, refuse, started) and when it is settled (ended), and
// the chains' own operations (starts, spawns, closes, sweeps).
type Chains struct {
	*env
	recovery *Recovery
}

// blocked says why step j may not run at now (see stepBlocked); nothing
// for a job outside chains.
func (g *Chains) blocked(st *store.State, j *job.Job, now time.Time) (string, error) {
	if j.Chain == nil {
		return "", nil
	}
	return stepBlocked(j, st.Chain(j.Chain.ChainID), now)
}

// started marks step j running as run runID in its chain.
func (g *Chains) started(st *store.State, j *job.Job, runID string, now time.Time) {
	if c := chainOf(st, j); c != nil {
		c.StepStarted(j.ID, runID, now)
	}
}

// stepRef names step s of c in ledger lines.
func stepRef(c *chain.Chain, s chain.Step) *ledger.ChainRef {
	return &ledger.ChainRef{ID: c.ID, Class: c.Class, Stage: s.Stage, Depth: s.Depth, Attempt: s.Attempt, Step: s.JobID}
}

// chainLine is a ledger line of kind chain about ref.
func (g *Chains) chainLine(ref *ledger.ChainRef, ev ledger.State, reason string, now time.Time) ledger.Entry {
	return ledger.Entry{Time: now.UTC(), RunID: "c" + runs.NewID(now)[1:], JobID: ref.ID, State: ev, Slot: now.UTC(),
		Reason: reason, Owner: g.Self.String(), Kind: ledger.KindChain, Chain: ref}
}

// refusedLine is the ledger line of a refusal; Event names its reason.
func (g *Chains) refusedLine(ref *ledger.ChainRef, err error, prefix string, now time.Time) ledger.Entry {
	e := g.chainLine(ref, ledger.ChainRefused, prefix+err.Error(), now)
	e.Event = chain.RefusalReason(err)
	return e
}

// breakerLine is a ledger line of kind chain about class breaker b.
func (g *Chains) breakerLine(b *chain.Breaker, ev ledger.State, reason string, now time.Time) ledger.Entry {
	e := g.chainLine(&ledger.ChainRef{ID: b.Class, Class: b.Class}, ev, reason, now)
	e.JobID = "breaker:" + b.Class
	return e
}

// closeChain closes c with how: its pending steps' jobs are removed, the
// runs owed to its steps with no run live (a retry after an interrupted
// run, a queued slot) are recorded skipped and their jobs removed too, the
// class's breaker counts the outcome (a limit is an invariant violation
// and opens it) and the lines are planned. A step still running keeps its
// job until the run ends (see ended). The caller holds the store
// lock.
func (g *Chains) closeChain(st *store.State, c *chain.Chain, how chain.Closing, now time.Time, p *Plan) {
	for _, id := range c.Close(now, how) {
		st.Remove(id)
	}
	for _, s := range slices.Clone(c.Steps) {
		j := st.Job(s.JobID)
		if j == nil || j.Chain == nil || len(j.Claims) > 0 || len(j.Pending) == 0 {
			continue
		}
		why, _ := stepBlocked(j, c, now)
		g.refuse(st, j, stepRefusal{runID: j.Pending[0].RunID, why: why}, now, p)
	}
	g.closed(st, c, now, p)
}

// closed plans what follows a chain's close: its line, the breaker's count
// and alert, and the pruning of old closed chains.
func (g *Chains) closed(st *store.State, c *chain.Chain, now time.Time, p *Plan) {
	p.lines = append(p.lines, g.chainLine(&ledger.ChainRef{ID: c.ID, Class: c.Class}, ledger.ChainClosed,
		fmt.Sprintf("closed (%s): %s", c.Outcome, c.ClosedReason), now))
	b := st.Breaker(c.Class)
	if o, opened := b.RecordClose(c, g.Chains.Policy(c.Class), now); opened {
		g.breakerOpened(b, o, c.ID, now, p)
	}
	st.PruneChains()
}

// breakerOpened plans the ledger line and the alerts of a breaker that
// opened: one row per target, durable in this write (b.Outbound), handed to
// the outbox after it.
func (g *Chains) breakerOpened(b *chain.Breaker, o chain.Opening, chainID string, now time.Time, p *Plan) {
	p.lines = append(p.lines, g.breakerLine(b, ledger.ChainBreakerOpened,
		fmt.Sprintf("opened until %s: %s; last runs %s", b.ResumeAt.Format(time.RFC3339), o.Reason, strings.Join(o.RunIDs, ", ")), now))
	alert := &notify.BreakerAlert{Class: b.Class, Reason: o.Reason, RunIDs: o.RunIDs, OpenedAt: *b.OpenedAt, ResumeAt: *b.ResumeAt}
	runID := fmt.Sprintf("breaker-%s-%d", b.Class, b.OpenedAt.UnixNano())
	for _, t := range g.Chains.Targets(b.Class) {
		id := notify.NotificationID(runID, notify.EventChainBreakerOpen, t)
		body := notify.Body{ID: id, Event: notify.EventChainBreakerOpen, JobID: chainID, RunID: runID, Slot: now.UTC(),
			Status: string(chain.BreakerOpen), Error: o.Reason, Time: now.UTC(), Breaker: alert}
		b.Outbound = append(b.Outbound, notify.Notification{ID: id, Target: t, Body: body, CreatedAt: now.UTC()})
		p.owed = true
	}
}

// stepRefusal is a run of a chain step its chain refused: its run id and
// the reason its skip is recorded with (see stepBlocked).
type stepRefusal struct {
	runID, why string
}

// refuse carries out refusal r of a run of chain step j: the step's
// pending runs (queued slots, retries) are recorded skipped with the same
// reason and dropped, as its chain will never let them run; the step, when
// no run of it is live, is marked skipped as run r.runID; a chain still
// open (it expired, the sweeper has not closed it yet) is closed expired;
// and the job is removed when nothing of it is left. The caller holds the
// store lock.
func (g *Chains) refuse(st *store.State, j *job.Job, r stepRefusal, now time.Time, p *Plan) {
	g.skipOwed(j, r.why, now, p)
	if c := chainOf(st, j); c != nil {
		if s := c.Step(j.ID); s != nil && s.Status.Open() && len(j.Claims) == 0 {
			s.Status, s.RunID, s.EndedAt, s.Reason = chain.StepSkipped, r.runID, utcPtr(now), r.why
		}
		g.closeExpired(st, c, now, p)
	}
	if len(j.Claims) == 0 && len(j.Outbound) == 0 {
		st.Remove(j.ID)
	}
}

// skipOwed records j's pending runs (queued slots, retries) skipped with
// reason why and drops them. The caller holds the store lock.
func (g *Chains) skipOwed(j *job.Job, why string, now time.Time, p *Plan) {
	for _, q := range j.Pending {
		e := g.entry(j, now, runs.Mark{RunID: q.RunID, State: ledger.StateSkipped, Slot: q.Slot, Trig: runs.Trigger(q.Trigger), Reason: why})
		e.Attempt, e.Forced = q.Attempt, q.Forced
		p.lines = append(p.lines, e)
	}
	j.Pending = nil
}

// closeExpired closes c (nil: nothing) expired when it is still open: a
// step was refused because it expired before the sweeper closed it. The
// caller holds the store lock.
func (g *Chains) closeExpired(st *store.State, c *chain.Chain, now time.Time, p *Plan) {
	if c != nil && c.Open() {
		g.closeChain(st, c, chain.Closing{Reason: chain.ReasonExpired, Outcome: chain.OutcomeFailure, Trigger: chain.TriggerExpiry}, now, p)
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

// ended records the end of a chain step's run in its chain (which
// closes when no step is left open) and removes the step's job, in the
// write that completes the run. A step whose job still has a run live, or
// one owed (a retry, a queued slot) that its chain would let start, is not
// over: it stays open in its chain, and the run that follows records its
// end. The caller holds the store lock.
func (g *Chains) ended(st *store.State, j *job.Job, cp *completion, p *Plan) {
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
		g.skipOwed(j, why, now, p)
		g.closeExpired(st, c, now, p)
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
			g.closed(st, c, now, p)
		}
	}
	if len(j.Pending) == 0 && len(j.Outbound) == 0 {
		st.Remove(j.ID)
	}
}
