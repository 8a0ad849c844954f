package memory

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/chronoscron/chronos/relay"
)

// flows is the engine's relay.Flows and Queue.Down; the flow steps that
// arming, claiming and settling take are core's (below).
type flows struct{ *core }

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
func (c *core) agent(agentID string) *agentState {
	a := c.agents[agentID]
	if a == nil {
		a = &agentState{leased: make(map[*entry]struct{}), flex: make(map[*entry]struct{})}
		c.agents[agentID] = a
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
func (c *core) endLease(ent *entry) {
	a := c.agents[ent.shot.AgentID]
	if a == nil {
		return
	}
	delete(a.leased, ent)
	if c.release(a, c.now().UnixMilli()) {
		c.signal()
	}
}

// release returns as many of a's held fires to the due heap as its room
// allows, in due order; it reports whether it returned any.
func (c *core) release(a *agentState, nowMs int64) bool {
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
		c.due.push(ent)
		moved = true
	}
	return moved
}

// releaseAll releases every agent's held fires its room allows; it reports
// whether any came back.
func (c *core) releaseAll() bool {
	nowMs := c.now().UnixMilli()
	moved := false
	for _, a := range c.agents {
		if c.release(a, nowMs) {
			moved = true
		}
	}
	return moved
}

// nextGate is the earliest gate of an agent with held fires, if any.
func (c *core) nextGate() (int64, bool) {
	best, ok := int64(0), false
	for _, a := range c.agents {
		if len(a.held) == 0 || a.policy.Disabled {
			continue
		}
		if g := a.gatedUntil(); g > 0 && (!ok || g < best) {
			best, ok = g, true
		}
	}
	return best, ok
}

// Down implements relay.Queue.
func (fl *flows) Down(ctx context.Context, l relay.Lease, delay, hold time.Duration, reason string) error {
	if err := fl.lock(ctx); err != nil {
		return fmt.Errorf("memory: down: %w", err)
	}
	defer fl.mu.Unlock()
	ent, err := fl.held(l)
	if err != nil {
		return fmt.Errorf("memory: down %s: %w", l.ScheduleID, err)
	}
	a := fl.agent(l.AgentID)
	a.probing = true
	a.failures = max(a.failures, l.AgentFailures+1)
	a.gateMs = max(a.gateMs, fl.now().Add(max(hold, 0)).UnixMilli())
	fl.requeue(ent, delay, reason)
	return nil
}

// SetAgentPolicy implements relay.Flows.
func (fl *flows) SetAgentPolicy(ctx context.Context, agentID string, p relay.AgentPolicy) error {
	if agentID == "" {
		return fmt.Errorf("memory: set agent policy: empty agent id: %w", relay.ErrInvalidPolicy)
	}
	if err := p.Check(); err != nil {
		return fmt.Errorf("memory: set agent policy of %s: %w: %w", agentID, relay.ErrInvalidPolicy, err)
	}
	if err := fl.lock(ctx); err != nil {
		return fmt.Errorf("memory: set agent policy: %w", err)
	}
	defer fl.mu.Unlock()
	a := fl.agent(agentID)
	a.policy = p
	// Without a parallelism of its own the agent takes the next claim's
	// default: every held fire goes back for that claim to judge.
	a.ep = p.Parallelism
	if fl.release(a, fl.now().UnixMilli()) {
		fl.signal()
	}
	return nil
}

// flowOf reports a's state; the caller holds mu.
func (fl *flows) flowOf(agentID string, a *agentState) relay.AgentFlow {
	f := relay.AgentFlow{AgentID: agentID}
	if a == nil {
		return f
	}
	nowMs := fl.now().UnixMilli()
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
func (fl *flows) AgentFlow(ctx context.Context, agentID string) (relay.AgentFlow, error) {
	if err := fl.lock(ctx); err != nil {
		return relay.AgentFlow{}, fmt.Errorf("memory: agent flow: %w", err)
	}
	defer fl.mu.Unlock()
	return fl.flowOf(agentID, fl.agents[agentID]), nil
}

// AgentFlows implements relay.Flows.
func (fl *flows) AgentFlows(ctx context.Context) ([]relay.AgentFlow, error) {
	if err := fl.lock(ctx); err != nil {
		return nil, fmt.Errorf("memory: agent flows: %w", err)
	}
	defer fl.mu.Unlock()
	var out []relay.AgentFlow
	for id, a := range fl.agents {
		if a.policy == (relay.AgentPolicy{}) && len(a.held) == 0 && !a.probing {
			continue
		}
		out = append(out, fl.flowOf(id, a))
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
func (fl *flows) AgentPhase(ctx context.Context, agentID string) (float64, error) {
	if err := fl.lock(ctx); err != nil {
		return 0, fmt.Errorf("memory: agent phase: %w", err)
	}
	defer fl.mu.Unlock()
	a := fl.agent(agentID)
	if a.phase == 0 {
		fl.phases++
		a.phase = relay.VanDerCorput(fl.phases)
	}
	return a.phase, nil
}
