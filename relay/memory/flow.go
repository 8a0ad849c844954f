package memory

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/chronoscron/chronos/relay"
)

// agentState is one agent's flow control (see relay.Flow).
type agentState struct {
	policy relay.AgentPolicy
	// ep is the parallelism the last claim applied to the agent (0:
	// unbounded): what release gives back room against.
	ep int
	// gateMs is when a Down hold ends; tatMs the next slot of its rate.
	gateMs   int64
	tatMs    float64
	probing  bool
	failures int
	phase    float64 // 0: none assigned yet
	leased   map[*entry]struct{}
	held     dueHeap // due fires held back, in due order
	flex     map[*entry]struct{}
}

// agent returns agentID's state, made on first use.
func (e *Engine) agent(agentID string) *agentState {
	a := e.agents[agentID]
	if a == nil {
		a = &agentState{leased: make(map[*entry]struct{}), flex: make(map[*entry]struct{})}
		e.agents[agentID] = a
	}
	return a
}

// flexAdd indexes an armed fire with a flexible window.
func (a *agentState) flexAdd(ent *entry) { a.flex[ent] = struct{}{} }

// answered ends a probe: a delivery of the agent was acked.
func (a *agentState) answered() {
	a.probing, a.failures, a.gateMs = false, 0, 0
}

// inFlight counts the agent's unexpired leases at nowMs.
func (a *agentState) inFlight(nowMs int64) int {
	n := 0
	for ent := range a.leased {
		if ent.untilMs > nowMs {
			n++
		}
	}
	return n
}

// gatedUntil is when the agent may next have a fire claimed (ms), or 0.
func (a *agentState) gatedUntil() int64 {
	return max(a.gateMs, int64(math.Ceil(a.tatMs)))
}

// room is how many more of the agent's fires may be leased at nowMs with
// parallelism par (0: unbounded), or -1 for no bound.
func (a *agentState) room(par int, nowMs int64) int {
	if a.policy.Disabled || a.gatedUntil() > nowMs {
		return 0
	}
	if a.probing {
		par = 1
	}
	if par <= 0 {
		return -1
	}
	return max(0, par-a.inFlight(nowMs))
}

// endLease forgets a lease of ent that ended and gives its agent's held
// fires the room it freed; the caller has taken ent off the lease heap.
func (e *Engine) endLease(ent *entry) {
	a := e.agents[ent.shot.AgentID]
	if a == nil {
		return
	}
	delete(a.leased, ent)
	if e.release(a, e.now().UnixMilli()) {
		e.signal()
	}
}

// release returns as many of a's held fires to the due heap as its room
// allows, in due order; it reports whether it returned any.
func (e *Engine) release(a *agentState, nowMs int64) bool {
	if len(a.held) == 0 {
		return false
	}
	n := a.room(a.ep, nowMs)
	if n < 0 {
		n = len(a.held)
	}
	moved := false
	for ; n > 0 && len(a.held) > 0; n-- {
		ent := a.held[0]
		a.held.remove(ent)
		ent.held = false
		e.due.push(ent)
		moved = true
	}
	return moved
}

// releaseAll releases every agent's held fires its room allows; it reports
// whether any came back.
func (e *Engine) releaseAll() bool {
	nowMs := e.now().UnixMilli()
	moved := false
	for _, a := range e.agents {
		if e.release(a, nowMs) {
			moved = true
		}
	}
	return moved
}

// nextGate is the earliest gate of an agent with held fires, if any.
func (e *Engine) nextGate() (int64, bool) {
	best, ok := int64(0), false
	for _, a := range e.agents {
		if len(a.held) == 0 || a.policy.Disabled {
			continue
		}
		if g := a.gatedUntil(); g > 0 && (!ok || g < best) {
			best, ok = g, true
		}
	}
	return best, ok
}

// Claim implements relay.Queue. Entries come out in due order, ties in arm
// order, under flow: a due entry whose agent has no room is moved to the
// agent's held heap instead. Each claim takes a fresh fencing token from an
// engine-wide counter, so a token is never handed out twice, not even after
// a replay resets the attempt counter.
func (e *Engine) Claim(ctx context.Context, max int, leaseFor time.Duration, flow relay.Flow) ([]relay.Lease, error) {
	if max <= 0 {
		return nil, nil
	}
	if leaseFor <= 0 {
		return nil, fmt.Errorf("memory: claim: lease duration %s is not positive", leaseFor)
	}
	if err := e.lock(ctx); err != nil {
		return nil, fmt.Errorf("memory: claim: %w", err)
	}
	defer e.mu.Unlock()
	now := e.now()
	nowMs := now.UnixMilli()
	until := now.Add(leaseFor)
	untilMs := ceilMs(until)
	// Agents whose gate passed, or whose room grew, get their held fires
	// back first, by this claim's flow.
	for _, a := range e.agents {
		if len(a.held) > 0 {
			a.ep = a.policy.Effective(flow).Parallelism
			e.release(a, nowMs)
		}
	}
	var out []relay.Lease
	claimed := time.Now()
	for len(out) < max && len(e.due) > 0 && e.due[0].dueMs <= nowMs {
		ent := e.due[0]
		e.due.remove(ent)
		a := e.agent(ent.shot.AgentID)
		p := a.policy.Effective(flow)
		a.ep = p.Parallelism
		if a.room(p.Parallelism, nowMs) == 0 {
			ent.held = true
			a.held.push(ent)
			continue
		}
		if p.Rate > 0 {
			a.tatMs = math.Max(a.tatMs, float64(nowMs)) + 1000/p.Rate
		}
		e.tokens++
		ent.token = e.tokens
		ent.untilMs = untilMs
		ent.shot.Attempt++
		ent.shot.State = relay.StateLeased
		e.leases.push(ent)
		a.leased[ent] = struct{}{}
		out = append(out, relay.Lease{OneShot: ent.shot, Token: ent.token, Until: until,
			ClaimedAt: claimed, InstanceStopped: e.stopped[ent.shot.InstanceID], AgentFailures: a.failures})
		e.pullForward(a, now, nowMs)
	}
	return out, nil
}

// pullForward makes a's armed fires whose flexible window has opened due
// now, so that they go out in the wake a claim just started.
func (e *Engine) pullForward(a *agentState, now time.Time, nowMs int64) {
	for ent := range a.flex {
		if ent.dueIdx >= 0 && !ent.held && ent.dueMs > nowMs && !ent.shot.FireAt.After(now) {
			ent.dueMs = nowMs
			ent.shot.DueAt = now
			e.due.fix(ent)
		}
	}
}

// Down implements relay.Queue.
func (e *Engine) Down(ctx context.Context, l relay.Lease, delay, hold time.Duration, reason string) error {
	if err := e.lock(ctx); err != nil {
		return fmt.Errorf("memory: down: %w", err)
	}
	defer e.mu.Unlock()
	ent, err := e.held(l)
	if err != nil {
		return fmt.Errorf("memory: down %s: %w", l.ScheduleID, err)
	}
	a := e.agent(l.AgentID)
	a.probing = true
	a.failures = max(a.failures, l.AgentFailures+1)
	a.gateMs = max(a.gateMs, e.now().Add(max(hold, 0)).UnixMilli())
	e.requeue(ent, delay, reason)
	return nil
}

// SetAgentPolicy implements relay.Flows.
func (e *Engine) SetAgentPolicy(ctx context.Context, agentID string, p relay.AgentPolicy) error {
	if agentID == "" {
		return fmt.Errorf("memory: set agent policy: empty agent id: %w", relay.ErrInvalidPolicy)
	}
	if err := p.Check(); err != nil {
		return fmt.Errorf("memory: set agent policy of %s: %w: %w", agentID, relay.ErrInvalidPolicy, err)
	}
	if err := e.lock(ctx); err != nil {
		return fmt.Errorf("memory: set agent policy: %w", err)
	}
	defer e.mu.Unlock()
	a := e.agent(agentID)
	a.policy = p
	// Without a parallelism of its own the agent takes the next claim's
	// default: every held fire goes back for that claim to judge.
	a.ep = p.Parallelism
	if e.release(a, e.now().UnixMilli()) {
		e.signal()
	}
	return nil
}

// flowOf reports a's state; the caller holds e.mu.
func (e *Engine) flowOf(agentID string, a *agentState) relay.AgentFlow {
	f := relay.AgentFlow{AgentID: agentID}
	if a == nil {
		return f
	}
	nowMs := e.now().UnixMilli()
	f.Policy = a.policy
	f.InFlight = a.inFlight(nowMs)
	f.Held = len(a.held)
	f.Probing = a.probing
	f.Failures = a.failures
	if g := a.gatedUntil(); g > nowMs {
		f.GateUntil = time.UnixMilli(g)
	}
	return f
}

// AgentFlow implements relay.Flows.
func (e *Engine) AgentFlow(ctx context.Context, agentID string) (relay.AgentFlow, error) {
	if err := e.lock(ctx); err != nil {
		return relay.AgentFlow{}, fmt.Errorf("memory: agent flow: %w", err)
	}
	defer e.mu.Unlock()
	return e.flowOf(agentID, e.agents[agentID]), nil
}

// AgentFlows implements relay.Flows.
func (e *Engine) AgentFlows(ctx context.Context) ([]relay.AgentFlow, error) {
	if err := e.lock(ctx); err != nil {
		return nil, fmt.Errorf("memory: agent flows: %w", err)
	}
	defer e.mu.Unlock()
	var out []relay.AgentFlow
	for id, a := range e.agents {
		if a.policy == (relay.AgentPolicy{}) && len(a.held) == 0 && !a.probing {
			continue
		}
		out = append(out, e.flowOf(id, a))
	}
	slices.SortFunc(out, func(x, y relay.AgentFlow) int {
		switch {
		case x.AgentID < y.AgentID:
			return -1
		case x.AgentID > y.AgentID:
			return 1
		}
		return 0
	})
	return out, nil
}

// AgentPhase implements relay.Flows.
func (e *Engine) AgentPhase(ctx context.Context, agentID string) (float64, error) {
	if err := e.lock(ctx); err != nil {
		return 0, fmt.Errorf("memory: agent phase: %w", err)
	}
	defer e.mu.Unlock()
	a := e.agent(agentID)
	if a.phase == 0 {
		e.phases++
		a.phase = relay.VanDerCorput(e.phases)
	}
	return a.phase, nil
}
