package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/chronoscron/chronos/agent/chain"
	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/store"
)

// Start starts the chain req asks for and stores j, the job of its first
// step, in one write, under the store lock. A refusal wraps
// chain.ErrDuplicate, chain.ErrBreakerOpen or chain.ErrLimit and is in the
// ledger.
func (g *Chains) Start(ctx context.Context, req chain.StartRequest, j *job.Job) (chain.Chain, job.Job, error) {
	now := req.Now
	var out chain.Chain
	var refused error
	p := &Plan{}
	err := g.Store.Update(ctx, func(st *store.State) error {
		*p, refused = Plan{}, nil
		br := st.LookupBreaker(req.Class)
		if br != nil && br.Settle(now) {
			p.lines = append(p.lines, g.breakerLine(br, ledger.ChainBreakerClosed, "cooldown over", now))
		}
		open := 0
		for _, c := range st.Chains() {
			if c.Class == req.Class && c.Open() {
				open++
			}
		}
		if refused = chain.CheckStart(req, st.Chain(req.ID), open, br); refused != nil {
			ref := &ledger.ChainRef{ID: req.ID, Class: req.Class, Stage: req.Stage}
			p.lines = append(p.lines, g.refusedLine(ref, refused, "start refused: ", now))
			st.Breaker(req.Class).NoteRefusal(refused)
			return nil
		}
		c := chain.New(req)
		step := c.Steps[0]
		j.ID, j.Chain, j.Name = step.JobID, c.Meta(step), stepName(c, step)
		if err := st.Add(j); err != nil {
			return err
		}
		if err := st.AddChain(c); err != nil {
			return err
		}
		st.Breaker(c.Class).NoteSpawn(now)
		p.lines = append(p.lines, g.chainLine(stepRef(c, step), ledger.ChainStarted,
			fmt.Sprintf("started; first step %s at %s; expires %s", step.JobID, step.FireAt.Format(time.RFC3339), c.ExpiresAt.Format(time.RFC3339)), now))
		out = c.Clone()
		return nil
	})
	if err != nil {
		return chain.Chain{}, job.Job{}, fmt.Errorf("agent: chain start: %w", err)
	}
	g.apply(ctx, p)
	if refused != nil {
		return chain.Chain{}, job.Job{}, fmt.Errorf("agent: chain start: %w", refused)
	}
	g.Signal()
	return out, j.Clone(), nil
}

// Spawn adds a step to chain chainID, with j, its job, under the store
// lock and in one write. The limits, the de-duplication and the class's breaker are
// enforced here: a spawn past a limit is refused (chain.ErrLimit) and
// closes the chain "limit: <which>", which opens the class's breaker; a
// spawn while the breaker is open is refused (chain.ErrBreakerOpen) and
// closes the chain "breaker open"; one after the chain's expiry is refused
// (chain.ErrExpired) and closes it "expired"; a duplicate
// (chain.ErrDuplicate) or a spawn into a closed chain (chain.ErrClosed) is
// refused and changes nothing. Every refusal is in the ledger.
func (g *Chains) Spawn(ctx context.Context, chainID string, req chain.SpawnRequest, j *job.Job) (chain.Chain, job.Job, error) {
	now := req.Now
	var out chain.Chain
	var refused error
	p := &Plan{}
	err := g.Store.Update(ctx, func(st *store.State) error {
		*p, refused = Plan{}, nil
		c := st.Chain(chainID)
		if c == nil {
			return fmt.Errorf("%w: %q", chain.ErrNotFound, chainID)
		}
		br := st.Breaker(c.Class)
		if br.Settle(now) {
			p.lines = append(p.lines, g.breakerLine(br, ledger.ChainBreakerClosed, "cooldown over", now))
		}
		req.FireAt = *j.NextRunAt
		step, err := c.PlanSpawn(req, br, g.Chains.Policy(c.Class).SpawnStorm)
		if errors.Is(err, chain.ErrInvalid) {
			return fmt.Errorf("%w: %w", g.Invalid, err)
		}
		if err != nil {
			refused = err
			return g.refuseSpawn(st, c, err, now, p)
		}
		j.ID, j.Chain, j.Name = step.JobID, c.Meta(step), stepName(c, step)
		if err := st.Add(j); err != nil {
			return err
		}
		c.AddStep(step)
		br.NoteSpawn(now)
		p.lines = append(p.lines, g.chainLine(stepRef(c, step), ledger.ChainSpawned,
			fmt.Sprintf("spawned %s by %s at %s", step.JobID, step.SpawnedBy, step.FireAt.Format(time.RFC3339)), now))
		out = c.Clone()
		return nil
	})
	if err != nil {
		return chain.Chain{}, job.Job{}, fmt.Errorf("agent: chain spawn: %w", err)
	}
	g.apply(ctx, p)
	if refused != nil {
		return chain.Chain{}, job.Job{}, fmt.Errorf("agent: chain spawn: %w", refused)
	}
	g.Signal()
	return out, j.Clone(), nil
}

// refuseSpawn records a refused spawn and closes the chain when the
// refusal says so. The caller holds the store lock.
func (g *Chains) refuseSpawn(st *store.State, c *chain.Chain, err error, now time.Time, p *Plan) error {
	ref := &ledger.ChainRef{ID: c.ID, Class: c.Class}
	p.lines = append(p.lines, g.refusedLine(ref, err, "spawn refused: ", now))
	st.Breaker(c.Class).NoteRefusal(err)
	if !c.Open() {
		return nil
	}
	var lim *chain.LimitError
	switch {
	case errors.As(err, &lim):
		g.closeChain(st, c, chain.Closing{Reason: "limit: " + lim.Limit, Outcome: chain.OutcomeFailure, Trigger: chain.TriggerLimit}, now, p)
	case errors.Is(err, chain.ErrBreakerOpen):
		g.closeChain(st, c, chain.Closing{Reason: chain.ReasonBreakerOpen, Outcome: chain.OutcomeFailure, Trigger: chain.TriggerBreaker}, now, p)
	case errors.Is(err, chain.ErrExpired):
		g.closeChain(st, c, chain.Closing{Reason: chain.ReasonExpired, Outcome: chain.OutcomeFailure, Trigger: chain.TriggerExpiry}, now, p)
	}
	return nil
}

// Close closes chain chainID as how says, by hand (or from a step):
// pending steps are cancelled (their jobs removed, so the reconcile cancels
// them at NAS). With coolingDown it tapers instead and closes at the end
// of it. A closed chain is refused with chain.ErrClosed.
func (g *Chains) Close(ctx context.Context, chainID string, how chain.Closing, coolingDown time.Duration) (chain.Chain, error) {
	now := g.now()
	var out chain.Chain
	p := &Plan{}
	err := g.Store.Update(ctx, func(st *store.State) error {
		*p = Plan{}
		c := st.Chain(chainID)
		if c == nil {
			return fmt.Errorf("%w: %q", chain.ErrNotFound, chainID)
		}
		if !c.Open() {
			return fmt.Errorf("%w: chain %s closed at %s, reason %s", chain.ErrClosed, c.ID, c.ClosedAt.Format(time.RFC3339), c.ClosedReason)
		}
		if coolingDown > 0 {
			if err := c.CoolDown(now, coolingDown, how); err != nil {
				return err
			}
			p.lines = append(p.lines, g.chainLine(&ledger.ChainRef{ID: c.ID, Class: c.Class}, ledger.ChainCoolingDown,
				fmt.Sprintf("cooling down for %s, then closes: %s", coolingDown, how.Reason), now))
		} else {
			g.closeChain(st, c, how, now, p)
		}
		out = c.Clone()
		return nil
	})
	if err != nil {
		return chain.Chain{}, fmt.Errorf("agent: chain close: %w", err)
	}
	g.apply(ctx, p)
	g.Signal()
	return out, nil
}

// List returns copies of the chains of class and state ("": any), oldest
// first.
func (g *Chains) List(ctx context.Context, class string, state chain.State) ([]chain.Chain, error) {
	out := []chain.Chain{}
	err := g.Store.View(ctx, func(st *store.State) error {
		for _, c := range st.Chains() {
			if (class == "" || c.Class == class) && (state == "" || c.State == state) {
				out = append(out, c.Clone())
			}
		}
		return nil
	})
	return out, err
}

// Get returns a copy of the chain with id (an error wraps
// chain.ErrNotFound).
func (g *Chains) Get(ctx context.Context, id string) (chain.Chain, error) {
	var out chain.Chain
	err := g.Store.View(ctx, func(st *store.State) error {
		c := st.Chain(id)
		if c == nil {
			return fmt.Errorf("agent: %w: %q", chain.ErrNotFound, id)
		}
		out = c.Clone()
		return nil
	})
	return out, err
}

// Breakers returns copies of the class breakers, ordered by class.
func (g *Chains) Breakers(ctx context.Context) ([]chain.Breaker, error) {
	out := []chain.Breaker{}
	err := g.Store.View(ctx, func(st *store.State) error {
		for _, b := range st.Breakers() {
			out = append(out, b.Clone())
		}
		return nil
	})
	return out, err
}

// Reset closes the breaker of class by hand and clears its failure
// streak (a ledger line says so). A class without a breaker record is
// chain.ErrNotFound.
func (g *Chains) Reset(ctx context.Context, class string) (chain.Breaker, error) {
	now := g.now()
	var out chain.Breaker
	p := &Plan{}
	err := g.Store.Update(ctx, func(st *store.State) error {
		*p = Plan{}
		b := st.LookupBreaker(class)
		if b == nil {
			return fmt.Errorf("%w: class %q has no breaker", chain.ErrNotFound, class)
		}
		was := b.State
		b.Reset()
		p.lines = append(p.lines, g.breakerLine(b, ledger.ChainBreakerReset, "reset by hand (was "+string(was)+")", now))
		out = b.Clone()
		return nil
	})
	if err != nil {
		return chain.Breaker{}, fmt.Errorf("agent: breaker reset: %w", err)
	}
	g.apply(ctx, p)
	return out, nil
}

// stepName is the name of a step's job, so `jobs list` shows its chain.
func stepName(c *chain.Chain, s chain.Step) string {
	return fmt.Sprintf("chain %s: %s (depth %d, attempt %d)", c.ID, s.Stage, s.Depth, s.Attempt)
}

// NextDeadline returns the earliest time something about chains is
// due: an open chain's expiry or taper end, or an open breaker's resume
// time. ok is false when nothing is.
func (g *Chains) NextDeadline(ctx context.Context) (time.Time, bool, error) {
	var next time.Time
	found := false
	consider := func(t time.Time, ok bool) {
		if ok && (!found || t.Before(next)) {
			next, found = t, true
		}
	}
	err := g.Store.View(ctx, func(st *store.State) error {
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

// Sweep closes the chains whose deadline has passed (expired:
// pending steps cancelled, their jobs removed so the reconcile cancels them
// at NAS; a taper's end) and closes the breakers whose cooldown is over.
// It reports how many chains it closed. A sweep with nothing due writes
// nothing.
func (g *Chains) Sweep(ctx context.Context) (int, error) {
	now := g.now()
	stale := false
	if err := g.Store.View(ctx, func(st *store.State) error { stale = len(staleSteps(st)) > 0; return nil }); err != nil {
		return 0, err
	}
	if next, ok, err := g.NextDeadline(ctx); err != nil || (!stale && (!ok || next.After(now))) {
		return 0, err
	}
	closed := 0
	p := &Plan{}
	err := g.Store.Update(ctx, func(st *store.State) error {
		*p, closed = Plan{}, 0
		for _, c := range st.Chains() {
			if ids, ok := c.Due(now); ok {
				for _, id := range ids {
					st.Remove(id)
				}
				g.closed(st, c, now, p)
				closed++
			}
		}
		for _, b := range st.Breakers() {
			if b.Settle(now) {
				p.lines = append(p.lines, g.breakerLine(b, ledger.ChainBreakerClosed, "cooldown over", now))
			}
		}
		for _, j := range staleSteps(st) {
			end := chain.Step{JobID: j.ID, Status: chain.StepInterrupted, Reason: "its run ended without a result (its owner died)"}
			if c := st.Chain(j.Chain.ChainID); c != nil && c.StepEnded(end, now) {
				g.closed(st, c, now, p)
			}
			st.Remove(j.ID)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("agent: chain sweep: %w", err)
	}
	g.apply(ctx, p)
	if closed > 0 {
		g.Signal()
	}
	return closed, nil
}

// RunSweeper sweeps chains (Sweep) at each chain deadline and
// after every change, until ctx ends. RunTimer runs it; a serving agent
// with another provider runs it itself.
func (g *Chains) RunSweeper(ctx context.Context) error {
	changes, unsubscribe := g.Subscribe()
	defer unsubscribe()
	const recheck = time.Minute
	for {
		if _, err := g.Sweep(ctx); err != nil && ctx.Err() == nil {
			g.Log.Warn("chain sweep failed; trying again", "error", err)
		}
		wait := recheck
		if next, ok, err := g.NextDeadline(ctx); err == nil && ok {
			wait = min(max(next.Sub(g.now()), 0)+10*time.Millisecond, recheck)
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
